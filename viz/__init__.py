"""viz package."""
