"""trend package."""
