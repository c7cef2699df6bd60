"""HPACK decoding (RFC 7541) of a connection seen from its middle: every header field
that can be known, and no answer for the others.

A capture that starts after a connection opened missed the entries the sender put in
its dynamic table before. A strict decoder fails the whole block at the first reference
to one of them; this one gives that field no value and goes on, because the fields of
a block are independent once the table's indices are tracked:

- **Indices are fixed by insertions alone.** The table is a list, newest entry first
  (index 62 is the newest). Each literal with incremental indexing puts one entry in
  front, on both sides, so the entries this side saw are the first ones of the sender's
  table, under the same indices. A field whose name or whole entry is a reference past
  them refers to an entry inserted before the capture: unknown (``None``), never an
  error, and the next fields still decode.
- **Entries of unknown name keep their place.** A literal with incremental indexing
  whose name is such a reference still inserts an entry: this side inserts a
  placeholder (name unknown, value known) so that every later index still lines up.
  A field that refers to the placeholder is unknown too.
- **Eviction only takes entries off the old end.** It never moves the entries that
  stay, so keeping an entry the sender has evicted cannot make a reference read another
  entry: a conforming sender never refers to an evicted one (nor, after an entry too
  large for its table emptied it, to anything older than what followed). What would
  shift every later index is an insertion left out, hence the placeholders. Eviction
  is tracked to forget the entries that are certainly gone: an entry's size is exact
  where its name is known; a placeholder's is not (its name could be long), so only
  its lower bound, 32 bytes and the value, is counted. Entries past the point where
  these sizes already exceed the table's maximum cannot still be there and are
  dropped; a reference to them, or past anything kept, is unknown, never a neighbour.
- **The maximum is what the sender last said.** A dynamic table size update sets it
  (and evicts); until one is seen the maximum is not known (the sender may have changed
  it before the capture), and entries are kept up to ``UNSEEN_MAX_SIZE`` bytes: a larger
  table only makes some references unknown.

A malformed block (a bad integer, bad Huffman code, a string cut short, index 0, a
size update after a field) raises :class:`HeaderBlockError`; the table is then in an
unknown state and the caller starts a fresh decoder, as it does after a gap.
"""

from __future__ import annotations

from hpack.exceptions import HPACKDecodingError
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

__all__ = ["UNSEEN_MAX_SIZE", "HeaderBlockError", "MidwayDecoder"]

#: Bytes of the dynamic table kept until the sender states its maximum (RFC 7541's
#: default is 4,096; peers that advertise more rarely go past 64 KiB).
UNSEEN_MAX_SIZE = 1 << 16
# The static table, index 1 to 61 (RFC 7541, appendix A), as (name, value) bytes.
_STATIC: tuple[tuple[bytes, bytes], ...] = HeaderTable.STATIC_TABLE
_STATIC_LEN = len(_STATIC)
# A size update past this is garbage rather than a table (the limit hpack's decoder
# was given here before).
_MAX_TABLE_SIZE = 1 << 24
# Per-entry overhead of a table entry's size (RFC 7541, 4.1).
_ENTRY_OVERHEAD = 32


class HeaderBlockError(ValueError):
    """A header block that is not valid HPACK: a bad integer or Huffman code, a string
    cut short, index 0, or a table size update after a field or past 16 MiB."""


class MidwayDecoder:
    """One direction's HPACK decoding state, tolerant of a table begun before the capture.

    Feed it every header block of the direction in order; each gives its fields, a
    field that needs an entry this side never saw as ``None``.

    Examples
    --------
    >>> from hpack import Encoder
    >>> enc = Encoder()
    >>> missed = enc.encode([(":path", "/a.B/C"), ("x-request-id", "r1")])
    >>> seen = enc.encode([(":method", "POST"), (":path", "/a.B/C"), ("x-request-id", "r2")])
    >>> MidwayDecoder().decode(seen)  # :path and the name x-request-id were in the table
    [(b':method', b'POST'), None, None]
    >>> MidwayDecoder().decode(b"\\x80")  # index 0
    Traceback (most recent call last):
    ...
    capture.hpack_midway.HeaderBlockError: index 0 is not a table entry
    """

    __slots__ = ("_fields", "_sizes", "_total", "max_size")

    def __init__(self) -> None:
        # Newest first: (name, value), or None where the name is unknown (a placeholder).
        self._fields: list[tuple[bytes, bytes] | None] = []
        # Each entry's size, or its lower bound where the name is unknown.
        self._sizes: list[int] = []
        self._total = 0
        #: The table's maximum size from the last size update seen (None: none yet).
        self.max_size: int | None = None

    def __len__(self) -> int:
        """The number of entries kept (known or placeholders), the newest first."""
        return len(self._fields)

    def decode(self, block: bytes) -> list[tuple[bytes, bytes] | None]:
        """The fields of one whole header block, in order; ``None`` for a field that
        refers to an entry this side never saw (or that a placeholder stands for).

        Raises
        ------
        HeaderBlockError
            When the block is not valid HPACK; the table is then unusable.

        Examples
        --------
        >>> d = MidwayDecoder()
        >>> d.decode(b"\\x82\\xbe")  # :method GET, then index 62: before the capture
        [(b':method', b'GET'), None]
        >>> d.decode(b"\\x7e\\x02r1\\xbe")  # name of index 62 (unknown), value r1; then the new entry
        [None, None]
        >>> d.decode(b"\\x44\\x02/x\\xbe\\xbf")  # :path /x goes in front; 63 is the placeholder
        [(b':path', b'/x'), (b':path', b'/x'), None]
        """
        out: list[tuple[bytes, bytes] | None] = []
        fields = self._fields
        n = len(block)
        i = 0
        try:
            while i < n:
                b = block[i]
                i += 1
                if b & 0x80:  # indexed field (6.1)
                    idx = b & 0x7F
                    if idx == 0x7F:
                        idx, i = _integer(block, i, idx)
                    if idx <= _STATIC_LEN:
                        if idx == 0:
                            raise HeaderBlockError("index 0 is not a table entry")
                        out.append(_STATIC[idx - 1])
                    else:
                        idx -= _STATIC_LEN + 1
                        out.append(fields[idx] if idx < len(fields) else None)
                    continue
                if b & 0x40:  # literal with incremental indexing (6.2.1)
                    prefix, insert = 0x3F, True
                elif b & 0x20:  # dynamic table size update (6.3)
                    if out:
                        raise HeaderBlockError("table size update after a field")
                    size = b & 0x1F
                    if size == 0x1F:
                        size, i = _integer(block, i, size)
                    self._resize(size)
                    continue
                else:  # literal without indexing or never indexed (6.2.2, 6.2.3)
                    prefix, insert = 0x0F, False
                idx = b & prefix
                if idx == prefix:
                    idx, i = _integer(block, i, idx)
                name: bytes | None
                if idx == 0:
                    name, i = _string(block, i)
                elif idx <= _STATIC_LEN:
                    name = _STATIC[idx - 1][0]
                else:
                    idx -= _STATIC_LEN + 1
                    entry = fields[idx] if idx < len(fields) else None
                    name = entry[0] if entry is not None else None
                value, i = _string(block, i)
                field = (name, value) if name is not None else None
                if insert:
                    self._insert(field, value)
                out.append(field)
        except HPACKDecodingError as e:  # raised by the Huffman decoder
            raise HeaderBlockError(str(e)) from None
        return out

    def _insert(self, field: tuple[bytes, bytes] | None, value: bytes) -> None:
        """Put an entry in front (a placeholder where ``field`` is None), then forget
        the entries that cannot still be in the sender's table."""
        # Only a lower bound where the name is unknown: the value and the overhead.
        size = _ENTRY_OVERHEAD + len(value) + (len(field[0]) if field is not None else 0)
        self._fields.insert(0, field)
        self._sizes.insert(0, size)
        self._total += size
        self._evict(self.max_size if self.max_size is not None else UNSEEN_MAX_SIZE)

    def _resize(self, size: int) -> None:
        if size > _MAX_TABLE_SIZE:
            raise HeaderBlockError(f"table size update to {size} bytes (at most {_MAX_TABLE_SIZE})")
        self.max_size = size
        self._evict(size)

    def _evict(self, limit: int) -> None:
        # The sizes counted are exact or too small, so while they exceed the limit the
        # oldest entry kept is certainly gone from the sender's table.
        while self._total > limit:
            self._fields.pop()
            self._total -= self._sizes.pop()


def _integer(block: bytes, i: int, value: int) -> tuple[int, int]:
    """The rest of an integer whose prefix was full (RFC 7541, 5.1), from ``block[i]``:
    the value and the position after it."""
    shift = 0
    n = len(block)
    while True:
        if i >= n:
            raise HeaderBlockError("integer cut short")
        c = block[i]
        i += 1
        value += (c & 0x7F) << shift
        if not c & 0x80:
            return value, i
        shift += 7
        if shift > 28:  # past 2**32: no length or index of a real block
            raise HeaderBlockError("integer longer than 5 bytes")


def _string(block: bytes, i: int) -> tuple[bytes, int]:
    """The string literal at ``block[i]`` (RFC 7541, 5.2), Huffman-decoded if marked so,
    and the position after it."""
    if i >= len(block):
        raise HeaderBlockError("string literal cut short")
    b = block[i]
    ln = b & 0x7F
    i += 1
    if ln == 0x7F:
        ln, i = _integer(block, i, ln)
    end = i + ln
    if end > len(block):
        raise HeaderBlockError(f"string literal of {ln} bytes cut short")
    s = block[i:end]
    return (decode_huffman(s) if b & 0x80 else s), end
