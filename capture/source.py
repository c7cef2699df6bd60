"""Packet sources: pcap and pcapng files (plain or gzip) and a fake source for tests.

Every source yields :class:`PacketBatch` objects: the packets of one chunk of input as
numpy arrays over one byte buffer, never a Python object per packet. Files are read in
chunks of ``chunk_bytes``, so memory stays bounded whatever the file size.

Formats: pcap with micro- or nanosecond timestamps in either byte order; pcapng with
any number of sections and interfaces, each with its own link type, timestamp
resolution (``if_tsresol``) and offset (``if_tsoffset``); either one compressed with
gzip. Interface statistics blocks of pcapng give the kernel's drop counts.

Damaged input is kept up to the damage: a truncated last record is counted and its
byte offset reported; a record with an impossible length makes the reader look for
the next plausible record header (resynchronize) and report the offset where it lost
and found its way; a gzip stream that is corrupt (a failed CRC or length check, a
deflate stream that does not decode) is said as such, not as a cut file, with every
record decompressed before the damage kept; a file that is not pcap/pcapng raises
:class:`TraceFileError`.
"""

from __future__ import annotations

import functools
import io
import os
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

import numpy as np

from capture._spans import native
from tracefmt import TraceFileError

__all__ = [
    "LINKTYPE_ETHERNET",
    "LINKTYPE_LINUX_SLL",
    "LINKTYPE_LINUX_SLL2",
    "LINKTYPE_NULL",
    "LINKTYPE_RAW",
    "FakeSource",
    "PacketBatch",
    "PacketSource",
    "PcapSource",
    "ReadStats",
    "packet_timestamps",
    "read_packets",
]

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LOOP = 108
LINKTYPE_LINUX_SLL = 113
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_LINUX_SLL2 = 276

DEFAULT_CHUNK_BYTES = 8 << 20
_MAX_RECORD = 1 << 18  # no real link has frames above 256 KiB; larger means a corrupt length
PathLike = str | os.PathLike[str]

_PCAP_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),  # microseconds, little-endian
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),  # nanoseconds
    b"\xa1\xb2\x3c\x4d": (">", 1),
}
_PCAPNG_SHB = b"\x0a\x0d\x0d\x0a"


@dataclass
class ReadStats:
    """What a reader saw: records, damage and the byte offsets where it was found."""

    packets: int = 0
    bytes: int = 0
    truncated_records: int = 0
    corrupt_records: int = 0
    resyncs: list[int] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)
    kernel_drops: int = 0
    skipped_blocks: int = 0

    def count(self, batch: PacketBatch) -> PacketBatch:
        """Count a batch that is handed out; returns it."""
        self.packets += len(batch)
        self.bytes += int(batch.caplen.sum())
        return batch

    def cut_short(self, what: str, at: int, left: int) -> None:
        """The file ended inside its last ``what`` (record or block)."""
        self.truncated_records += 1
        self.damage.append(f"last {what} cut short at byte {at} ({left} bytes of a {what} left)")

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "packets": self.packets,
            "bytes": self.bytes,
            "truncated_records": self.truncated_records,
            "corrupt_records": self.corrupt_records,
            "resync_offsets": list(self.resyncs),
            "damage": list(self.damage),
            "kernel_drops": self.kernel_drops,
        }


@dataclass(frozen=True)
class PacketBatch:
    """The packets of one chunk: arrays over a shared byte buffer.

    Attributes
    ----------
    ts_ns : numpy.ndarray
        int64 nanoseconds since the epoch, one per packet.
    linktype : numpy.ndarray
        uint16 pcap link type of each packet (pcapng interfaces may differ).
    offset : numpy.ndarray
        int64 start of each packet's bytes in ``data``.
    caplen : numpy.ndarray
        int64 captured length (the bytes present in ``data``).
    wirelen : numpy.ndarray
        int64 original length on the wire (larger than ``caplen`` when snaplen cut it).
    data : numpy.ndarray
        uint8 buffer holding the packet bytes.
    """

    ts_ns: np.ndarray
    linktype: np.ndarray
    offset: np.ndarray
    caplen: np.ndarray
    wirelen: np.ndarray
    data: np.ndarray

    def __len__(self) -> int:
        return len(self.ts_ns)

    def packet(self, i: int) -> bytes:
        """The captured bytes of packet ``i`` (for tests and slow paths only)."""
        o = int(self.offset[i])
        return self.data[o : o + int(self.caplen[i])].tobytes()

    @classmethod
    def from_packets(
        cls, packets: Sequence[tuple[int, bytes]], linktype: int = LINKTYPE_ETHERNET
    ) -> PacketBatch:
        """Build a batch from ``(ts_ns, frame bytes)`` pairs.

        Examples
        --------
        >>> b = PacketBatch.from_packets([(5, b"ab"), (7, b"cde")])
        >>> len(b), b.packet(1), int(b.ts_ns[0])
        (2, b'cde', 5)
        """
        lens = np.array([len(p) for _, p in packets], np.int64)
        offs = np.zeros(len(packets), np.int64)
        if len(packets):
            offs[1:] = np.cumsum(lens)[:-1]
        data = np.frombuffer(b"".join(p for _, p in packets), np.uint8).copy()
        return cls(
            ts_ns=np.array([t for t, _ in packets], np.int64),
            linktype=np.full(len(packets), linktype, np.uint16),
            offset=offs,
            caplen=lens,
            wirelen=lens.copy(),
            data=data,
        )


class PacketSource(Protocol):
    """Anything that yields packet batches and counts what it read."""

    stats: ReadStats
    name: str

    def __iter__(self) -> Iterator[PacketBatch]: ...


class FakeSource:
    """A packet source over packets held in memory, for tests.

    Parameters
    ----------
    packets : iterable of (int, bytes)
        ``(timestamp_ns, frame)`` in capture order.
    linktype : int
        Link type of every frame (1 = Ethernet, 101 = raw IP, ...).
    batch_size : int
        Packets per batch, to exercise chunk boundaries.
    name : str
        Source name (the capture point with ``point_from_file``).

    Examples
    --------
    >>> src = FakeSource([(1, b"x"), (2, b"y"), (3, b"z")], batch_size=2)
    >>> [len(b) for b in src]
    [2, 1]
    """

    def __init__(
        self,
        packets: Iterable[tuple[int, bytes]],
        *,
        linktype: int = LINKTYPE_ETHERNET,
        batch_size: int = 4096,
        name: str = "fake",
    ) -> None:
        self._packets = list(packets)
        self.linktype = linktype
        self.batch_size = max(1, batch_size)
        self.name = name
        self.stats = ReadStats()

    def __iter__(self) -> Iterator[PacketBatch]:
        self.stats = ReadStats()
        for i in range(0, len(self._packets), self.batch_size):
            yield self.stats.count(
                PacketBatch.from_packets(self._packets[i : i + self.batch_size], self.linktype)
            )


def _open(source: PathLike | IO[bytes]) -> tuple[IO[bytes], str, bool]:
    """Open a path or take a file object; unwrap gzip. Returns (file, name, owned)."""
    if isinstance(source, str | os.PathLike):
        name = str(source)
        try:
            f: IO[bytes] = open(source, "rb")  # noqa: SIM115 - closed by the reader
        except FileNotFoundError:
            raise TraceFileError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise TraceFileError(f"{name}: is a directory (give a pcap or pcapng file)") from None
        except OSError as exc:
            raise TraceFileError(f"{name}: cannot open ({exc.strerror})") from None
        owned = True
    else:
        f, name, owned = source, getattr(source, "name", "<stream>"), False
    head = f.read(2)
    if not head:
        if owned:
            f.close()
        raise TraceFileError(f"{name}: empty file (a pcap or pcapng capture has at least a file header)")
    if head == b"\x1f\x8b":
        f.seek(0) if f.seekable() else None
        under = f if f.seekable() else _Prefixed(head, f)
        return _Gunzip(under, f if owned else None), name, True  # type: ignore[arg-type]
    if f.seekable():
        f.seek(0)
        return f, name, owned
    return _Prefixed(head, f), name, owned  # type: ignore[return-value]


class _Prefixed(io.RawIOBase):
    """A read-only stream that first returns ``head``, then reads ``f``."""

    def __init__(self, head: bytes, f: IO[bytes]) -> None:
        self._head, self._f = head, f

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if self._head:
            h, self._head = self._head, b""
            more = self._f.read(n - len(h)) if n > len(h) else (self._f.read() if n < 0 else b"")
            return h[:n] + (more or b"") if n >= 0 else h + (more or b"")
        return self._f.read(n)


#: What gzip says of a stream that ends inside a member (kept word for word).
_GZIP_CUT = "Compressed file ended before the end-of-stream marker was reached"


@dataclass(frozen=True)
class _GzipCorrupt:
    """A gzip stream whose data is corrupt: ``why`` (a CRC or length check that failed,
    a deflate stream that does not decode, a member header that is not gzip's) and the
    decompressed bytes handed out before it (``at``)."""

    why: str
    at: int


class _Gunzip:
    """Decompress a gzip stream (any number of members, zero padding after them allowed)
    and close the file under it.

    Every byte that inflates before damage is handed out: a cut stream ends where it is
    cut and ``damage`` says so; a corrupt one (a failed CRC or length check, a deflate
    stream that does not decode, bytes after a member that are not gzip) ends where it
    breaks and ``corrupt`` says why and where. ``gzip.GzipFile`` would drop what its
    buffer held when the error came (up to a few KiB of good records before it) and says
    a corrupt stream and a cut one alike.
    """

    _PIECE = 1 << 16  # compressed bytes read at a time, and decompressed bytes made

    def __init__(self, f: IO[bytes], under: IO[bytes] | None) -> None:
        self._f, self._under = f, under
        self.damage: str | None = None  # a cut stream, said as such
        self.corrupt: _GzipCorrupt | None = None
        self._in = b""  # compressed bytes read, not yet consumed
        self._at_eof = False  # the file under has no more bytes
        self._out = b""  # decompressed bytes made beyond what the last read asked for
        self._member: Any = None  # the member being inflated (a zlib decompressor)
        self._members = 0
        self._crc = self._size = 0
        self._given = 0
        self._done = False

    def read(self, n: int = -1) -> bytes:
        want = n if n >= 0 else 1 << 62
        pieces: list[bytes] = []
        while want > 0:
            if not self._out:
                if self._done:
                    break
                self._out = self._inflate()
                continue
            piece, self._out = self._out[:want], self._out[want:]
            pieces.append(piece)
            self._given += len(piece)
            want -= len(piece)
        return b"".join(pieces)

    def close(self) -> None:
        if self._under is not None:
            self._under.close()

    # ---- the stream, piece by piece --------------------------------------------------
    def _inflate(self) -> bytes:
        """The next decompressed piece (may be empty); sets ``_done`` at the end or damage."""
        if self._member is None and not self._start_member():
            self._done = True
            return b""
        if not self._in and not self._fill(1):
            # The file ended inside the member; zlib may still hold output for it.
            try:
                out = self._member.flush()
            except zlib.error as exc:
                self._broken(f"corrupt deflate stream: {_zlib_reason(exc)}", 0)
                return b""
            self._count(out)
            if self._member.eof:
                self._in = self._member.unused_data
                self._end_member(len(out))
            else:
                self._cut(len(out))
            return out
        # A copy of the decompressor as it was, to replay the input a byte at a time if
        # it turns out corrupt: the output before the bad byte is good and is kept.
        before = self._member.copy()
        data = self._in
        try:
            out = self._member.decompress(data, self._PIECE)
        except zlib.error as exc:
            out = _inflate_until_error(before, data)
            self._broken(f"corrupt deflate stream: {_zlib_reason(exc)}", len(out))
            return out
        self._count(out)
        if self._member.eof:
            self._in = self._member.unused_data
            self._end_member(len(out))
        else:
            self._in = self._member.unconsumed_tail
        return out

    def _count(self, out: bytes) -> None:
        self._crc = zlib.crc32(out, self._crc)
        self._size += len(out)

    def _fill(self, k: int) -> bool:
        """Read until ``_in`` holds ``k`` bytes; False if the file ends first."""
        while len(self._in) < k and not self._at_eof:
            more = self._f.read(max(self._PIECE, k - len(self._in)))
            if more:
                self._in += more
            else:
                self._at_eof = True
        return len(self._in) >= k

    def _take(self, k: int) -> bytes | None:
        if not self._fill(k):
            return None
        out, self._in = self._in[:k], self._in[k:]
        return out

    def _take_zero_ended(self) -> bytes | None:
        """A zero-terminated header field (file name or comment), with its zero."""
        at = 0
        while (end := self._in.find(b"\0", at)) < 0:
            at = len(self._in)
            if not self._fill(at + 1):
                return None
        return self._take(end + 1)

    def _start_member(self) -> bool:
        """Read the next member's header (RFC 1952); False at the end of the stream or
        when the header is cut or not gzip's (``damage``/``corrupt`` set)."""
        if self._members:
            # Zeros after a member are padding (as gzip reads them), not another member.
            while self._fill(1):
                self._in = self._in.lstrip(b"\0")
                if self._in:
                    break
        if not self._fill(1):
            return False
        self._fill(2)
        if self._in[:2] != b"\x1f\x8b":
            return self._broken("bytes after the last member that are not gzip", 0)
        head = self._take(10)
        if head is None:
            return self._cut(0)
        if head[2] != 8:
            return self._broken(f"unknown compression method {head[2]}", 0)
        flags = head[3]
        if flags & 4:  # FEXTRA
            size = self._take(2)
            if size is None or self._take(int.from_bytes(size, "little")) is None:
                return self._cut(0)
        for flag in (8, 16):  # FNAME, FCOMMENT
            if flags & flag and self._take_zero_ended() is None:
                return self._cut(0)
        if flags & 2 and self._take(2) is None:  # FHCRC
            return self._cut(0)
        self._member = zlib.decompressobj(-zlib.MAX_WBITS)
        self._members += 1
        self._crc = self._size = 0
        return True

    def _end_member(self, pending: int) -> None:
        """Check the member's trailer (CRC-32 and length of its data) and go on to the
        next member; ``pending``: decompressed bytes made but not yet handed out."""
        self._member = None
        trailer = self._take(8)
        if trailer is None:
            self._cut(pending)
        elif int.from_bytes(trailer[:4], "little") != self._crc:
            self._broken("CRC check failed", pending)
        elif int.from_bytes(trailer[4:], "little") != self._size & 0xFFFFFFFF:
            self._broken("length check failed", pending)

    def _cut(self, pending: int) -> bool:
        self._done = True
        self.damage = (
            f"compressed data cut or damaged after {self._given + pending:,} bytes ({_GZIP_CUT}); "
            "the packets before it are kept"
        )
        return False

    def _broken(self, why: str, pending: int) -> bool:
        self._done = True
        self.corrupt = _GzipCorrupt(why, self._given + pending)
        return False


def _inflate_until_error(member: Any, data: bytes) -> bytes:
    """What ``member`` (a zlib decompressor) makes of ``data`` fed a byte at a time,
    up to the byte it finds corrupt."""
    out: list[bytes] = []
    for k in range(len(data)):
        try:
            out.append(member.decompress(data[k : k + 1]))
        except zlib.error:
            break
    return b"".join(out)


def _zlib_reason(exc: zlib.error) -> str:
    """zlib's reason without the error code: 'invalid block type', not 'Error -3 ...: invalid block type'."""
    return str(exc).rpartition(": ")[2] or str(exc)


#: The finest ``if_tsresol`` read: 10^-18 s or 2^-60 s a tick. Finer ones (the field
#: allows 2^-127) have ticks whose nanoseconds overflow 64-bit arithmetic.
_FINEST_TSRESOL = {False: 18, True: 60}

#: The largest ``if_tsoffset``, in seconds, whose nanoseconds fit in 64 bits (about 272
#: years either side of the epoch, past every date a trace can hold).
_MAX_TSOFFSET_S = 1 << 33


#: The largest snaplen taken as the file's limit on record lengths; above it (0xFFFFFFFF,
#: written for "no limit") the header says nothing, and a record longer than a real link's
#: frame is a corrupt length, to resynchronize after.
_MAX_SNAPLEN = 1 << 24


def _max_record(snaplen: int) -> int:
    """The longest record a pcap with header ``snaplen`` holds; longer ones are corrupt.

    >>> _max_record(0), _max_record(1500), _max_record(1 << 20), _max_record(0xFFFFFFFF)
    (262144, 65535, 1048576, 262144)
    """
    if not snaplen or snaplen > _MAX_SNAPLEN:
        return _MAX_RECORD
    return snaplen if snaplen > _MAX_RECORD else min(max(snaplen, 65535), _MAX_RECORD)


def _tsresol_ns(code: int) -> tuple[int, int] | None:
    """(multiply, divide) turning pcapng ticks into ns for ``if_tsresol`` ``code``; None
    for a resolution finer than the reader takes (:data:`_FINEST_TSRESOL`).

    >>> _tsresol_ns(6), _tsresol_ns(12), _tsresol_ns(0x80 | 10), _tsresol_ns(19)
    ((1000, 1), (1, 1000), (1000000000, 1024), None)
    """
    exp = code & 0x7F
    if exp > _FINEST_TSRESOL[bool(code & 0x80)]:
        return None
    if code & 0x80:  # power of two
        return (10**9, 1 << exp) if exp else (10**9, 1)
    if exp <= 9:
        return 10 ** (9 - exp), 1
    return 1, 10 ** (exp - 9)


class PcapSource:
    """Read a pcap or pcapng file (optionally gzip-compressed) in batches.

    Parameters
    ----------
    source : path or binary file object
        The capture.
    chunk_bytes : int
        Bytes read per batch; memory use is a small multiple of this.

    Raises
    ------
    TraceFileError
        Missing, empty or not a pcap/pcapng file (wrong magic number).
    """

    def __init__(self, source: PathLike | IO[bytes], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        self._source = source
        self.name = str(source) if isinstance(source, str | os.PathLike) else getattr(source, "name", "")
        self.chunk_bytes = max(1 << 12, int(chunk_bytes))
        self.stats = ReadStats()
        self._missing_said: set[int] = set()  # interfaces reported missing
        self.format = ""
        # Check the magic now, so a wrong file fails before any work starts.
        f, self.name, owned = _open(source)
        try:
            magic = f.read(4)
        finally:
            if owned:
                f.close()
            # Back to the start for reading: the file object given, not the gzip stream
            # over it (which cannot seek), so a gzip capture given open reads too.
            if not isinstance(source, str | os.PathLike) and source.seekable():
                source.seek(0)
        if magic in _PCAP_MAGIC:
            self.format = "pcap"
        elif magic == _PCAPNG_SHB:
            self.format = "pcapng"
        else:
            raise TraceFileError(
                f"{self.name}: not a pcap or pcapng file (magic {magic.hex() or 'missing'}; "
                "expected a1b2c3d4, a1b23c4d or 0a0d0d0a, optionally gzip-compressed)"
            )

    def __iter__(self) -> Iterator[PacketBatch]:
        self.stats = ReadStats()
        f, _, owned = _open(self._source)
        try:
            if self.format == "pcap":
                yield from self._pcap(f)
            else:
                yield from self._pcapng(f)
        finally:
            if owned:
                f.close()

    # ---- both formats ------------------------------------------------------------------
    def _chunks(self, f: IO[bytes], what: str, base: int, scan: _Scan) -> Iterator[PacketBatch]:
        """Read ``f`` a chunk at a time and hand ``scan`` each buffer (what the last one
        left over, then the chunk) with the file offset ``base`` of its first byte; the
        batches it finds go out counted. ``what``: a record or a block, for the damage."""
        tail = b""
        while True:
            block = f.read(self.chunk_bytes)
            if not block and getattr(f, "damage", None):
                self.stats.damage.append(f.damage)
                f.damage = ""  # said once
            eof = not block
            buf = tail + block if tail else block
            if not buf:
                self._ended(f, what, base, b"")
                break
            batch, off, eof = scan(buf, base, eof)
            if batch is not None:
                yield self.stats.count(batch)
            tail = buf[off:]
            base += off
            if eof:
                self._ended(f, what, base, tail)
                break

    # ---- pcap -------------------------------------------------------------------------
    def _pcap(self, f: IO[bytes]) -> Iterator[PacketBatch]:
        head = _read_full(f, 24)
        if len(head) < 24:
            raise TraceFileError(f"{self.name}: pcap file header cut short ({len(head)} of 24 bytes)")
        bo, unit = _PCAP_MAGIC[head[:4]]
        snaplen, network = struct.unpack(bo + "II", head[16:24])
        fmt = _PcapFormat(
            bo=bo,
            unit=unit,
            # The link type is the low 16 bits (the high ones carry FCS length and flags).
            linktype=network & 0xFFFF,
            max_len=_max_record(snaplen),
        )
        yield from self._chunks(f, "record", 24, functools.partial(self._pcap_scan, fmt))

    def _pcap_scan(
        self, fmt: _PcapFormat, buf: bytes, base: int, eof: bool
    ) -> tuple[PacketBatch | None, int, bool]:
        """The batch of the whole records in ``buf``, where they end and whether reading ends there."""
        offs, off, eof = self._pcap_offsets(fmt, buf, base, eof)
        if not len(offs):
            return None, off, eof
        batch, fmt.last_sec = _pcap_batch(fmt, buf, offs)
        return batch, off, eof

    def _pcap_offsets(
        self, fmt: _PcapFormat, buf: bytes, base: int, eof: bool
    ) -> tuple[np.ndarray, int, bool]:
        """Offsets of the whole records in ``buf``, the offset where they end and whether
        reading ends there (damage that no record follows); corrupt lengths are skipped
        over (resynchronized) and reported."""
        max_len, bo = fmt.max_len, fmt.bo
        caplen_at = struct.Struct(bo + "I").unpack_from
        n = len(buf)
        found: list[np.ndarray] = []
        off = 0
        while True:
            offs, off, corrupt = walk_records(buf, off, max_len, bo)
            found.append(offs)
            if not corrupt:
                return _joined(found), off, eof
            cap = caplen_at(buf, off + 8)[0]
            new = self._resync_pcap(buf, off, max_len, caplen_at, bo, fmt.last_sec, eof)
            self.stats.corrupt_records += 1
            if new is None:
                if not eof and n - off < 2 * _MAX_RECORD:
                    return _joined(found), off, eof  # need more bytes to decide
                self.stats.damage.append(
                    f"corrupt record length {cap} at byte {base + off}; no valid record "
                    "follows, reading stopped there"
                )
                self.stats.resyncs.append(base + off)
                return _joined(found), n, True
            self.stats.damage.append(
                f"corrupt record length {cap} at byte {base + off}; resumed at byte {base + new}"
            )
            self.stats.resyncs.append(base + off)
            off = new

    def _ended(self, f: IO[bytes], what: str, at: int, tail: bytes) -> None:
        """The input ended with ``tail``, the start of a ``what`` (record or block) at
        byte ``at``, left over. A cut file cut that last one short; a corrupt gzip stream
        is said first (it explains any damage found before it was detected) and the
        incomplete last one counted as corrupt, not as cut."""
        corrupt: _GzipCorrupt | None = getattr(f, "corrupt", None)
        if corrupt is None:
            if tail:
                self.stats.cut_short(what, at, len(tail))
            return
        line = f"gzip data corrupt ({corrupt.why}) after byte {corrupt.at}; the {what}s before it are kept"
        if tail:
            self.stats.corrupt_records += 1
            line += f", the incomplete one at byte {at} is not"
        self.stats.damage.insert(0, line)

    def _missing_interface(self, ifid: int, known: int, at: int) -> None:
        """Count a packet naming an interface the file never described; the first such
        packet per interface is reported as damage (the packet cannot be decoded)."""
        if ifid not in self._missing_said:
            self._missing_said.add(ifid)
            self.stats.damage.append(
                f"packets name interface {ifid}, which the file never described ({known} described); "
                f"first at byte {at}, skipped"
            )

    def _resync_pcap(
        self, buf: bytes, off: int, max_len: int, caplen_at: Any, bo: str, last_sec: int | None, eof: bool
    ) -> int | None:
        """The offset of the next plausible record after ``off`` (two headers that chain)."""
        hdr = struct.Struct(bo + "IIII").unpack_from
        n = len(buf)
        for cand in range(off + 1, n - 16):
            sec, frac, cap, wire = hdr(buf, cand)
            if cap > max_len or wire < cap or frac >= 1_000_000_000 or wire > 1 << 18:
                continue
            if last_sec is not None and abs(sec - last_sec) > 86400:
                continue
            nxt = cand + 16 + cap
            if nxt == n and eof:
                return cand
            if nxt + 16 > n:
                continue
            sec2, _, cap2, wire2 = hdr(buf, nxt)
            if cap2 <= max_len and wire2 >= cap2 and abs(sec2 - sec) <= 86400:
                return cand
        return None

    # ---- pcapng -----------------------------------------------------------------------
    def _pcapng(self, f: IO[bytes]) -> Iterator[PacketBatch]:
        section = _PcapngSection()
        yield from self._chunks(f, "block", 0, functools.partial(self._pcapng_scan, section))

    def _pcapng_scan(
        self, section: _PcapngSection, buf: bytes, base: int, eof: bool
    ) -> tuple[PacketBatch | None, int, bool]:
        """The packets of the whole blocks in ``buf``, where those blocks end and whether
        reading ends there; section headers and interface blocks update ``section``."""
        n = len(buf)
        off = 0
        found = _PacketBlocks(ifaces=list(section.ifaces))
        offs, ifids, tss, caps, wires = found.offs, found.ifids, found.tss, found.caps, found.wires
        u2, blk = section.u2, section.blk
        while off + 12 <= n:
            btype, blen = u2(buf, off)
            if btype == 0x0A0D0D0A:
                self._new_section(section, buf, off, base)
                found.sections.append((len(offs), len(found.ifaces)))
                u2, blk = section.u2, section.blk
                btype, blen = u2(buf, off)
            if blen < 12 or blen % 4 or blen > _MAX_RECORD + 64:
                new = self._bad_block_length(buf, off, base, blen, u2)
                if new is None:
                    off, eof = n, True
                    break
                off = new
                continue
            if off + blen > n:
                break
            if btype == 6 and off + 28 <= n:  # enhanced packet block
                _, _, ifid, hi, lo, cap, wire = blk(buf, off)
                if cap <= blen - 32 and ifid < len(section.ifaces):
                    offs.append(off + 28)
                    ifids.append(ifid)
                    tss.append((hi << 32) | lo)
                    caps.append(cap)
                    wires.append(wire)
                else:
                    self._unreadable_packet(cap, blen, ifid, len(section.ifaces), base + off)
            elif btype in (2, 3):  # obsolete packet block, simple packet block
                _older_packet_block(section, found, buf, off, btype, blen)
            elif btype == 1:  # interface description block
                section.ifaces.append(self._idb(buf, off, blen, section.bo, base + off))
                found.ifaces.append(section.ifaces[-1])
            elif btype == 5:  # interface statistics block
                self.stats.kernel_drops += _isb_drops(buf, off, blen, section.bo)
            off += blen
        batch = None
        if offs:
            batch, late = _pcapng_batch(buf, found)
            if len(late):
                self.stats.corrupt_records += len(late)
                first = base + int(late[0]) - 28
                self.stats.damage.append(
                    f"{len(late)} packet{'s' if len(late) > 1 else ''} from byte {first} on "
                    "with a timestamp out of range (before 1677 or after 2262 by its interface's "
                    "if_tsresol and if_tsoffset), not read"
                )
                batch = batch if len(batch) else None
        return batch, off, eof

    def _new_section(self, section: _PcapngSection, buf: bytes, off: int, base: int) -> None:
        """A section header block at ``off``: its byte order; no interfaces yet."""
        magic = buf[off + 8 : off + 12]
        if magic == b"\x4d\x3c\x2b\x1a":
            section.set_byte_order("<")
        elif magic == b"\x1a\x2b\x3c\x4d":
            section.set_byte_order(">")
        else:
            raise TraceFileError(f"{self.name}: bad pcapng byte-order magic at byte {base + off}")
        section.ifaces = []

    def _bad_block_length(self, buf: bytes, off: int, base: int, blen: int, u2: Any) -> int | None:
        """Count and report a block length that cannot be; the offset of the next plausible
        block, or None when none follows."""
        self.stats.corrupt_records += 1
        self.stats.resyncs.append(base + off)
        new = _resync_pcapng(buf, off, u2)
        if new is None:
            self.stats.damage.append(
                f"corrupt pcapng block length {blen} at byte {base + off}; "
                "no valid block follows, reading stopped there"
            )
        else:
            self.stats.damage.append(
                f"corrupt pcapng block length {blen} at byte {base + off}; resumed at byte {base + new}"
            )
        return new

    def _unreadable_packet(self, cap: int, blen: int, ifid: int, known: int, at: int) -> None:
        """An enhanced packet block at byte ``at`` whose packet overruns it (corrupt) or
        names an interface the file never described (skipped)."""
        if cap > blen - 32:
            self.stats.corrupt_records += 1
            self.stats.damage.append(f"packet length {cap} overruns its block at byte {at}")
        else:
            self.stats.skipped_blocks += 1
            self._missing_interface(ifid, known, at)

    def _idb(self, buf: bytes, off: int, blen: int, bo: str, at: int) -> tuple[int, int, int, int]:
        """An interface's (link type, multiply, divide, offset in s); an interface whose
        resolution or offset no timestamp can be read with gets multiply 0 (its packets
        are then counted as damaged), and the reason is said once."""
        linktype = struct.unpack_from(bo + "H", buf, off + 8)[0]
        mul, div, tsoffset = 1000, 1, 0  # default resolution: microseconds
        p, end = off + 16, off + blen - 4
        while p + 4 <= end:
            code, length = struct.unpack_from(bo + "HH", buf, p)
            if code == 0:
                break
            if code == 9 and length >= 1:
                resol = _tsresol_ns(buf[p + 4])
                if resol is None:
                    exp, two = buf[p + 4] & 0x7F, bool(buf[p + 4] & 0x80)
                    self.stats.damage.append(
                        f"interface at byte {at}: if_tsresol {'2' if two else '10'}^-{exp} s is out of range "
                        f"(at most 10^-{_FINEST_TSRESOL[False]} or 2^-{_FINEST_TSRESOL[True]}); "
                        "its packets are not read"
                    )
                    return linktype, 0, 1, 0
                mul, div = resol
            elif code == 14 and length >= 8:
                tsoffset = struct.unpack_from(bo + "q", buf, p + 4)[0]
                if abs(tsoffset) > _MAX_TSOFFSET_S:
                    self.stats.damage.append(
                        f"interface at byte {at}: if_tsoffset {tsoffset} s is out of range "
                        f"(at most {_MAX_TSOFFSET_S:,} s either way); its packets are not read"
                    )
                    return linktype, 0, 1, 0
            p += 4 + ((length + 3) & ~3)
        return linktype, mul, div, tsoffset


#: Reads one buffer of a capture: (buffer, its file offset, input ended) -> (the batch
#: of its whole records or None, the offset where they end, reading ends there).
_Scan = Callable[[bytes, int, bool], tuple[PacketBatch | None, int, bool]]


@dataclass
class _PcapFormat:
    """A pcap file's header as the reader uses it, and the seconds of the last record read
    (a resynchronization candidate a day away from it is not a record)."""

    bo: str  # byte order of the header fields
    unit: int  # ns per tick of the fraction field
    linktype: int
    max_len: int  # the largest record length that is not corrupt
    last_sec: int | None = None


def walk_records(buf: bytes, off: int, max_len: int, bo: str) -> tuple[np.ndarray, int, bool]:
    """Follow the pcap record chain in ``buf`` from byte ``off``.

    Returns the offsets (int64) of the whole records found, the offset where the walk
    stopped, and whether it stopped at a corrupt record (a captured length above
    ``max_len``) rather than at the end of ``buf``. ``bo`` is the file's byte order
    (``"<"`` or ``">"``). Runs compiled when ``capture.native`` is built, otherwise one
    Python step per record (same results).

    Examples
    --------
    >>> recs = b"".join(struct.pack("<IIII", 1, 0, n, n) + b"x" * n for n in (3, 1))
    >>> offs, stop, corrupt = walk_records(recs + b"\\0" * 5, 0, 65535, "<")
    >>> offs.tolist(), stop, corrupt
    ([0, 19], 36, False)
    """
    if native is not None:
        out = np.empty((len(buf) - off) // 16 + 1, np.int64)
        count, off, corrupt = native.pcap_walk(buf, off, max_len, bo == ">", out)
        return out[:count].copy(), off, corrupt
    caplen_at = struct.Struct(bo + "I").unpack_from
    n = len(buf)
    offs: list[int] = []
    append = offs.append
    while off + 16 <= n:
        cap = caplen_at(buf, off + 8)[0]
        if cap > max_len:
            return np.array(offs, np.int64), off, True
        if off + 16 + cap > n:
            break
        append(off)
        off += 16 + cap
    return np.array(offs, np.int64), off, False


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _pcap_batch(fmt: _PcapFormat, buf: bytes, offs: np.ndarray) -> tuple[PacketBatch, int]:
    """The records at ``offs`` in ``buf`` as a batch, and the seconds of the last one."""
    o = offs
    raw = np.frombuffer(buf, np.uint8)
    # Each header as two 8-byte words (seconds and fraction, captured and
    # original length): two gathers instead of sixteen.
    words = _record_words(raw, o, fmt.bo)
    sec = words[0].astype(np.int64)
    ts = sec * 1_000_000_000 + words[1].astype(np.int64) * fmt.unit
    cap_a = words[2].astype(np.int64)
    batch = PacketBatch(
        ts_ns=ts,
        linktype=np.full(len(o), fmt.linktype, np.uint16),
        offset=o + 16,
        caplen=cap_a,
        wirelen=np.maximum(words[3].astype(np.int64), cap_a),
        data=raw,
    )
    return batch, int(sec[-1])


class _PcapngSection:
    """The pcapng section being read: its byte order (with readers of block fields in it)
    and the interfaces it described so far (link type, ns multiplier and divisor, offset
    in seconds)."""

    def __init__(self) -> None:
        self.ifaces: list[tuple[int, int, int, int]] = []
        self.set_byte_order("<")

    def set_byte_order(self, bo: str) -> None:
        self.bo = bo
        self.u2 = struct.Struct(bo + "II").unpack_from
        self.blk = struct.Struct(bo + "IIIIIII").unpack_from


@dataclass
class _PacketBlocks:
    """The packets of a buffer's pcapng blocks: where each starts, its interface (in its
    own section), its timestamp in interface ticks, its captured and original length.

    A buffer may reach into later sections, each with interfaces of its own: ``ifaces``
    holds those of every section the buffer reaches, in order, and ``sections`` the
    first packet and first interface (in ``ifaces``) of each section that starts in it.
    """

    offs: list[int] = field(default_factory=list)
    ifids: list[int] = field(default_factory=list)
    tss: list[int] = field(default_factory=list)
    caps: list[int] = field(default_factory=list)
    wires: list[int] = field(default_factory=list)
    ifaces: list[tuple[int, int, int, int]] = field(default_factory=list)
    sections: list[tuple[int, int]] = field(default_factory=list)

    def add(self, off: int, ifid: int, ticks: int, cap: int, wire: int) -> None:
        self.offs.append(off)
        self.ifids.append(ifid)
        self.tss.append(ticks)
        self.caps.append(cap)
        self.wires.append(wire)


def _older_packet_block(
    section: _PcapngSection, found: _PacketBlocks, buf: bytes, off: int, btype: int, blen: int
) -> None:
    """Add the packet of a simple (3: interface 0, no timestamp) or obsolete (2) packet
    block at ``off`` to ``found``, when its interface is described."""
    if btype == 3:
        if section.ifaces:
            wire = section.u2(buf, off + 8)[0]
            found.add(off + 12, 0, 0, min(wire, blen - 16), wire)
        return
    _, _, ifd, hi, lo, cap, wire = section.blk(buf, off)
    ifid = ifd & 0xFFFF if section.bo == "<" else ifd >> 16
    if ifid < len(section.ifaces) and cap <= blen - 32:
        found.add(off + 28, ifid, (hi << 32) | lo, cap, wire)


def _ticks_ns(
    ticks: np.ndarray, mul: np.ndarray, div: np.ndarray, tsoff_s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Nanoseconds since the epoch of pcapng ``ticks`` (uint64) at ``mul / div`` ns a tick
    plus ``tsoff_s`` seconds, and which of them are out of range: past what int64
    nanoseconds hold (never wrapped around) or on an unreadable interface (``mul`` 0).

    >>> t, bad = _ticks_ns(np.array([3, 2**62], np.uint64), np.array([10**9] * 2), np.array([1, 1]),
    ...                    np.array([0, 0]))
    >>> t.tolist(), bad.tolist()
    ([3000000000, 0], [False, True])
    """
    top = np.iinfo(np.int64).max
    div_u = div.astype(np.uint64)
    whole, part = ticks // div_u, ticks % div_u
    # Below top - 10**9 before the fraction (< mul <= 10**9) and the offset are added.
    bad = (mul == 0) | (whole > ((top - 10**9) // np.maximum(mul, 1)).astype(np.uint64))
    whole_ns = np.where(bad, 0, whole).astype(np.int64) * mul
    exact = div <= 1 << 33  # part * mul fits in 64 bits
    frac = np.where(
        exact,
        (np.where(exact, part, 0) * mul.astype(np.uint64)) // div_u,
        np.floor(part.astype(np.float64) * (mul / div)).astype(np.uint64),
    ).astype(np.int64)
    ts = whole_ns + frac
    off_ns = tsoff_s * 1_000_000_000  # |tsoff_s| <= 2**33: fits
    out = ts + off_ns
    # Out of int64 either way once shifted; INT64_MIN is the null timestamp of pandas and Arrow tools.
    bad |= (off_ns > 0) & (out < ts) | (off_ns < 0) & (out > ts) | (out == np.iinfo(np.int64).min)
    return np.where(bad, 0, out), bad


def _pcapng_batch(buf: bytes, found: _PacketBlocks) -> tuple[PacketBatch, np.ndarray]:
    """The packets ``found`` in ``buf`` as a batch, timestamps in ns by their interfaces,
    and the offsets of those left out for a timestamp out of range."""
    raw = np.frombuffer(buf, np.uint8)
    ifid_a = np.array(found.ifids, np.int64)
    # A section's interface numbers count from its first interface in ``found.ifaces``.
    shift = 0
    for first_packet, first_iface in found.sections:
        ifid_a[first_packet:] += first_iface - shift
        shift = first_iface
    info = np.array(found.ifaces, np.int64).reshape(-1, 4)
    ticks = np.array(found.tss, np.uint64)
    ts, bad = _ticks_ns(ticks, info[ifid_a, 1], info[ifid_a, 2], info[ifid_a, 3])
    cap_a = np.array(found.caps, np.int64)
    offs = np.array(found.offs, np.int64)
    keep = ~bad
    batch = PacketBatch(
        ts_ns=ts[keep],
        linktype=info[ifid_a, 0].astype(np.uint16)[keep],
        offset=offs[keep],
        caplen=cap_a[keep],
        wirelen=np.maximum(np.array(found.wires, np.int64), cap_a)[keep],
        data=raw,
    )
    return batch, offs[bad]


def _record_words(raw: np.ndarray, at: np.ndarray, bo: str) -> list[np.ndarray]:
    """The four 32-bit fields (seconds, fraction, captured and original length) of the
    pcap record headers at ``at``, in byte order ``bo``."""
    view = np.ndarray(shape=(len(raw) - 7,), dtype=bo + "u8", buffer=raw, strides=(1,))
    first, second = view[at], view[at + 8]
    low, high = np.uint64(0xFFFFFFFF), np.uint64(32)
    if bo == "<":
        return [first & low, first >> high, second & low, second >> high]
    return [first >> high, first & low, second >> high, second & low]


def _resync_pcapng(buf: bytes, off: int, u2: Any) -> int | None:
    """The next block after ``off`` whose length is sane and repeated at its end (4-aligned)."""
    n = len(buf)
    for cand in range(off + 4, n - 12, 4):
        btype, blen = u2(buf, cand)
        if btype not in (1, 2, 3, 5, 6) or blen < 12 or blen % 4 or cand + blen > n:
            continue
        # The trailing length is 4 bytes; u2 reads 8, so read the pair ending at it.
        if blen <= _MAX_RECORD + 64 and u2(buf, cand + blen - 8)[1] == blen:
            return cand
    return None


def _isb_drops(buf: bytes, off: int, blen: int, bo: str) -> int:
    """``isb_ifdrop`` of an interface statistics block (0 when absent)."""
    p, end = off + 20, off + blen - 4  # after interface id and the 64-bit timestamp
    drops = 0
    while p + 4 <= end:
        code, length = struct.unpack_from(bo + "HH", buf, p)
        if code == 0:
            break
        if code == 5 and length == 8:  # isb_ifdrop
            drops = struct.unpack_from(bo + "Q", buf, p + 4)[0]
        p += 4 + ((length + 3) & ~3)
    return drops


def _read_full(f: IO[bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        more = f.read(n - len(out))
        if not more:
            break
        out += more
    return out


def read_packets(source: PathLike | IO[bytes], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> PcapSource:
    """Open a pcap/pcapng file (or gzip of one) as a packet source yielding batches.

    Parameters
    ----------
    source : path or binary file object
        The capture file.
    chunk_bytes : int
        Bytes read per batch.

    Returns
    -------
    PcapSource
        Iterate it for :class:`PacketBatch` objects; ``.stats`` counts what was read.

    Examples
    --------
    >>> import io, struct
    >>> hdr = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    >>> rec = struct.pack("<IIII", 10, 5, 3, 3) + b"abc"
    >>> src = read_packets(io.BytesIO(hdr + rec))
    >>> [(int(b.ts_ns[0]), b.packet(0)) for b in src]
    [(10000005000, b'abc')]
    """
    return PcapSource(source, chunk_bytes=chunk_bytes)


def packet_timestamps(path: PathLike | IO[bytes], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> np.ndarray:
    """Timestamps (int64 ns since the epoch) of every packet in a capture, in file order.

    Reads the file in chunks; only the timestamps are kept.

    Examples
    --------
    >>> import io, struct
    >>> hdr = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    >>> recs = b"".join(struct.pack("<IIII", 1, ns, 1, 1) + b"x" for ns in (7, 9))
    >>> packet_timestamps(io.BytesIO(hdr + recs)).tolist()
    [1000000007, 1000000009]
    """
    parts = [b.ts_ns.copy() for b in read_packets(path, chunk_bytes=chunk_bytes)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)
