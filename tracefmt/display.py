"""Text from a trace shown safely: names come from packets (a Host header, a DNS name, a
key) and may hold anything, so every character that would act instead of show is shown
as an escape."""

from __future__ import annotations

import re

__all__ = ["printable"]

# C0 and C1 controls, DEL, and the invisible formatting characters that reorder or hide
# text (zero-width, bidirectional embeddings and isolates, line and paragraph
# separators, the byte-order mark).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")


_SHORT = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _SHORT.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def printable(text: str, keep: str = "") -> str:
    """``text`` with every control and invisible formatting character, except those in
    ``keep``, written as a visible escape (``\\x1b``, ``\\n``, ``\\u202e``).

    A name printed through it cannot recolour a terminal, set its title, fake a line of
    output or reverse the text after it; SVG and XML written from it stay well-formed.

    Examples
    --------
    >>> printable("web\\x1b[31m\\nfake row")
    'web\\\\x1b[31m\\\\nfake row'
    >>> printable("two\\nlines\\x07", keep="\\n")
    'two\\nlines\\\\x07'
    >>> printable("café → db")
    'café → db'
    """
    if keep:
        return _UNSAFE.sub(lambda m: m.group() if m.group() in keep else _escape(m), text)
    return _UNSAFE.sub(_escape, text)
