"""The exceptions every wirepath package raises.

::

    WirepathError                      base of everything wirepath raises on purpose
    ├── SchemaError (ValueError)       a table or file does not follow the trace schema
    ├── ParseError (ValueError)        a line of a text file is malformed (names file:line)
    ├── ParameterError (ValueError)    a parameter value is out of range or unknown
    ├── TraceFileError (OSError)       a file is missing, unreadable, truncated or corrupt
    └── MissingToolError (RuntimeError) a binary, package or privilege is missing

Every message names the bad value and says what would be right, e.g.
``unknown op 'cal' (must be one of call, return, send)``.
"""

from __future__ import annotations

__all__ = [
    "MissingToolError",
    "ParameterError",
    "ParseError",
    "SchemaError",
    "TraceFileError",
    "WirepathError",
]


class WirepathError(Exception):
    """Base class of the errors wirepath raises for bad input or a missing tool."""


class SchemaError(WirepathError, ValueError):
    """A table or file does not follow the message-trace schema."""


class ParameterError(WirepathError, ValueError):
    """A parameter value is out of range or not one of the allowed values."""


class ParseError(WirepathError, ValueError):
    """A line of a text input is malformed.

    Parameters
    ----------
    path : str
        The file being read.
    line : int
        1-based line number of the first bad line.
    reason : str
        What is wrong and what would be right.
    """

    def __init__(self, path: str, line: int, reason: str) -> None:
        self.path = path
        self.line = line
        self.reason = reason
        super().__init__(f"{path}:{line}: {reason}")


class TraceFileError(WirepathError, OSError):
    """A file is missing, unreadable, truncated or not in the expected format."""


class MissingToolError(WirepathError, RuntimeError):
    """A required binary, package or privilege is missing; the message says how to get it."""
