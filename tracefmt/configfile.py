"""Reading configuration-sized inputs: TOML and JSON configurations, names files, result
files to import. One reader bounds them all.

A configuration is read whole, so an endless or huge input (``/dev/zero``, a link to a
capture, a FIFO that never ends) would fill memory before any parser could object, and
the process would not act on SIGTERM while it waits: :func:`read_config_bytes` stops
one byte past a size limit instead. A document nested thousands of levels deep would
overflow the parsers' recursion (``RecursionError``): :func:`nesting_depth` counts the
brackets first, outside strings and comments, in one pass, and :func:`load_json` and
:func:`load_toml` refuse a document deeper than a limit no configuration comes near.
Every refusal is one line naming the file, what is wrong and what is allowed.

Examples
--------
>>> nesting_depth('{"a": [1, {"b": "]]]"}]}')
3
>>> load_json('{"a": [1, 2]}', "x.json")
{'a': [1, 2]}
>>> load_json("[" * 200 + "]" * 200, "deep.json")
Traceback (most recent call last):
...
tracefmt.errors.ParseError: deep.json:1: nested 200 levels deep (at most 100 allowed)
"""

from __future__ import annotations

import codecs
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Any

from tracefmt.errors import ParseError, TraceFileError

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "load_json",
    "load_toml",
    "nesting_depth",
    "read_config_bytes",
    "read_config_text",
]

#: Larger than any configuration, names file or results file a person or a CI job writes.
MAX_CONFIG_BYTES = 64 << 20

#: Brackets and braces nested deeper than this are no configuration (ours nest 3 deep).
MAX_CONFIG_DEPTH = 100

_CHUNK = 1 << 20

# Strings and comments, whose brackets do not nest: TOML's four kinds of string, JSON's
# one, and TOML's comments. Longest forms first, so '"""' is not read as '""' + '"'. An
# unclosed string runs to the end of its line (or input) instead of failing, so that no
# input makes the scan start over at every quote.
_TOML_SKIP = re.compile(
    rb'"""[\s\S]*?(?:"""|\Z)|\'\'\'[\s\S]*?(?:\'\'\'|\Z)|"(?:[^"\\\n]|\\.)*"?|\'[^\'\n]*\'?|#[^\n]*'
)
_JSON_SKIP = re.compile(rb'"(?:[^"\\]|\\.)*"?')


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n:,} bytes"


def read_config_bytes(path: str | os.PathLike[str], what: str, *, limit: int = MAX_CONFIG_BYTES) -> bytes:
    """The bytes of ``path`` (a leading UTF-8 byte order mark dropped), read to at most
    ``limit`` bytes.

    Parameters
    ----------
    path : str or os.PathLike
        A regular file, or a FIFO or device that ends.
    what : str
        What the file should be, for the messages (``"a TOML names file"``).
    limit : int, optional
        Refuse inputs longer than this many bytes.

    Returns
    -------
    bytes

    Raises
    ------
    TraceFileError
        Missing, a directory, unreadable, or longer than ``limit``.

    Examples
    --------
    >>> try:
    ...     read_config_bytes("/dev/zero", "a TOML file", limit=1000)
    ... except TraceFileError as e:
    ...     print(e)
    /dev/zero: longer than 1,000 bytes, so not a TOML file (is it the right file?)
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:
            chunks, size = [], 0
            while size <= limit:
                chunk = f.read(min(_CHUNK, limit + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except FileNotFoundError:
        raise TraceFileError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise TraceFileError(f"{p}: is a directory (expected {what})") from None
    except OSError as exc:
        raise TraceFileError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    if size > limit:
        raise TraceFileError(f"{p}: longer than {_size(limit)}, so not {what} (is it the right file?)")
    return b"".join(chunks).removeprefix(codecs.BOM_UTF8)


def read_config_text(path: str | os.PathLike[str], what: str, *, limit: int = MAX_CONFIG_BYTES) -> str:
    """:func:`read_config_bytes` decoded as UTF-8; a bad byte names its line.

    Raises
    ------
    TraceFileError
        As :func:`read_config_bytes`.
    ParseError
        The bytes are not UTF-8.
    """
    data = read_config_bytes(path, what, limit=limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ParseError(str(path), line, f"not UTF-8 text (byte 0x{data[e.start]:02x})") from None


def nesting_depth(text: str | bytes, *, toml: bool = False) -> int:
    """How deep brackets and braces nest in ``text``, outside strings (and, for TOML,
    comments); an upper bound when the text is malformed.

    >>> nesting_depth('a = [[1], {b = "[[[["}]  # ]]]', toml=True)
    2
    >>> nesting_depth("")
    0
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    bare = (_TOML_SKIP if toml else _JSON_SKIP).sub(b"", data)
    if not bare:
        return 0
    import numpy as np  # only where a file is read: a command line's start needs none

    b = np.frombuffer(bare, dtype=np.uint8)
    # '[' and '{' open, ']' and '}' close; a stray closer cannot make a depth negative.
    step = (b == 0x5B).astype(np.int64) + (b == 0x7B) - (b == 0x5D) - (b == 0x7D)
    return int(max(np.cumsum(step).max(initial=0), 0))


def _check_depth(text: str, where: str, *, toml: bool, max_depth: int) -> None:
    depth = nesting_depth(text, toml=toml)
    if depth > max_depth:
        raise ParseError(where, 1, f"nested {depth} levels deep (at most {max_depth} allowed)")


def load_json(text: str | bytes, where: str, *, max_depth: int = MAX_CONFIG_DEPTH) -> Any:
    """Parse JSON configuration text; too deep or malformed is one ``ParseError``.

    Raises
    ------
    ParseError
        ``FILE:LINE: not JSON: ...`` or nested deeper than ``max_depth``.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            line = text.count(b"\n", 0, e.start) + 1
            raise ParseError(where, line, f"not UTF-8 text (byte 0x{text[e.start]:02x})") from None
    _check_depth(text, where, toml=False, max_depth=max_depth)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(where, e.lineno, f"not JSON: {e.msg}") from None
    except RecursionError:  # a stack already deep when called; the count above is the rule
        raise ParseError(where, 1, "nested too deep for a configuration") from None


def load_toml(text: str, where: str, *, max_depth: int = MAX_CONFIG_DEPTH) -> dict[str, Any]:
    """Parse TOML configuration text; nested deeper than ``max_depth`` is one ``ParseError``.

    A syntax error raises ``tomllib.TOMLDecodeError`` as ever: each caller words it.

    >>> load_toml("a = [[1, 2]]", "x.toml")
    {'a': [[1, 2]]}
    """
    _check_depth(text, where, toml=True, max_depth=max_depth)
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise ParseError(where, 1, "nested too deep for a configuration") from None
