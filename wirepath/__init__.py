"""The wirepath command line: argument parsing and wiring; the logic lives in the packages."""

__all__ = ["__version__"]

__version__ = "0.1.0"
