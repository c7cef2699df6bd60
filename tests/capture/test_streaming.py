"""Streaming conversion: files (or batches) in order through one converter that carries
open connections across them. A capture split into rotated pieces converts to the very
messages of the whole file, the trace's parts are readable while they are written, and
memory does not grow with the input."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from testkit.pcap import OURS, SHARED, SHARED_PCAPS

import capture
import tracefmt
from capture.convert import StreamConverter
from capture.frames import TcpConnection
from capture.source import FakeSource, read_packets

ROOT = Path(__file__).resolve().parents[2]
DATA = SHARED_PCAPS
_PCAPNG_PACKETS = (2, 3, 6)  # packet blocks: obsolete, simple, enhanced


def split_capture(path: Path, out_dir: Path, pieces: int) -> list[Path]:
    """``path`` cut into ``pieces`` files of about equal packet counts, named like tcpdump's
    rotations (``c.pcap``, ``c.pcap1``, ...): each piece repeats the file header (for
    pcapng, every section and interface block seen so far), then holds its records."""
    raw = path.read_bytes()
    if raw[:4] == b"\x0a\x0d\x0d\x0a":
        head, records = _pcapng_blocks(raw)
    else:
        bo = "<" if raw[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
        records, off = [], 24
        while off + 16 <= len(raw):
            cap = struct.unpack_from(bo + "I", raw, off + 8)[0]
            records.append((b"", raw[off : off + 16 + cap]))
            off += 16 + cap
        head = raw[:24]
    cuts = np.linspace(0, len(records), pieces + 1).astype(int)
    files = []
    for k in range(pieces):
        part = records[cuts[k] : cuts[k + 1]]
        # A piece starts with the header blocks in force at its first record.
        pre = part[0][0] if part and part[0][0] else head
        f = out_dir / (f"{path.name}" + (str(k) if k else ""))
        f.write_bytes(pre + b"".join(r for _, r in part))
        files.append(f)
    return files


def _pcapng_blocks(raw: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Header (section and interface blocks) and, per packet block, the headers in force
    at it with the block itself (other blocks ride along with the next packet)."""
    off, head, pending = 0, b"", b""
    out: list[tuple[bytes, bytes]] = []
    bo = "<"
    while off + 12 <= len(raw):
        btype = struct.unpack_from("<I", raw, off)[0]
        if btype == 0x0A0D0D0A:
            bo = "<" if raw[off + 8 : off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
            head = b""
        blen = struct.unpack_from(bo + "I", raw, off + 4)[0]
        block = raw[off : off + blen]
        btype = struct.unpack_from(bo + "I", raw, off)[0]
        if btype == 0x0A0D0D0A or btype == 1:
            head += block
        elif btype in _PCAPNG_PACKETS:
            out.append((head, pending + block))
            pending = b""
        else:
            pending += block
        off += blen
    if pending and out:
        out[-1] = (out[-1][0], out[-1][1] + pending)
    return head, out


def _rows(path: Path) -> list[tuple]:
    t = pq.read_table(path)
    cols = [
        t[c].cast(pa.string())
        if pa.types.is_dictionary(t[c].type)
        else t[c].cast(pa.int64())
        if pa.types.is_timestamp(t[c].type)
        else t[c]
        for c in t.column_names
    ]
    return list(zip(*(c.to_pylist() for c in cols), strict=True))


@pytest.mark.parametrize("path", SHARED + OURS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_rotated_pieces_give_the_messages_of_the_whole_file(path: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole.parquet"
    capture.convert_pcaps([path], whole)
    pieces = split_capture(path, tmp_path, 3)
    assert [p.name for p in capture.live.capture_files(pieces[0])] == [p.name for p in pieces]
    split = tmp_path / "split.parquet"
    report = capture.convert_pcaps(pieces, split)
    assert report.packets == sum(len(b) for b in read_packets(path))
    assert _rows(split) == _rows(whole)


@pytest.mark.parametrize("path", SHARED + OURS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_small_batches_give_the_messages_of_one_pass(path: Path, tmp_path: Path) -> None:
    whole = tmp_path / "whole.parquet"
    capture.convert_pcaps([path], whole)
    small = tmp_path / "small.parquet"
    with StreamConverter(small) as conv:
        for batch in read_packets(path, chunk_bytes=4096):
            conv.add_batch(batch)
        conv.finish()
    assert _rows(small) == _rows(whole)


def test_parts_hold_the_trace_in_time_order(tmp_path: Path) -> None:
    path = DATA / "zeek" / "http_methods.pcap"  # many short connections: parts as they close
    if not path.exists():
        pytest.skip("shared captures not here")
    out, parts = tmp_path / "t.parquet", tmp_path / "t"
    with StreamConverter(out, parts_dir=parts, part_every_s=0.0) as conv:
        for batch in read_packets(path, chunk_bytes=4096):
            conv.add_batch(batch)
        report = conv.finish(provenance={"run": "test"})
    names = sorted(p.name for p in parts.iterdir())
    assert len(names) > 3
    assert names == [f"part-{k:05d}.parquet" for k in range(len(names))]
    trace = tracefmt.read_trace(out)
    assert report.messages == trace.num_rows
    assert tracefmt.read_trace_metadata(out).provenance["run"] == "test"
    joined = ds.dataset(parts, format="parquet").to_table()
    assert joined["timestamp"].to_pylist() == trace["timestamp"].to_pylist()
    assert joined["sender"].to_pylist() == trace["sender"].to_pylist()
    # Each part is a trace of its own, readable by wirepath.
    assert sum(tracefmt.read_trace(parts / n).num_rows for n in names) == trace.num_rows
    # A second run into the same parts directory is refused rather than mixed in.
    with pytest.raises(tracefmt.TraceFileError, match="holds trace parts already"):
        StreamConverter(tmp_path / "u.parquet", parts_dir=parts)


def test_abort_leaves_no_partial_file(tmp_path: Path) -> None:
    out, parts = tmp_path / "t.parquet", tmp_path / "t"

    def interrupted() -> None:
        with StreamConverter(out, parts_dir=parts, part_every_s=0.0) as conv:
            for batch in read_packets(DATA / "zeek" / "http_methods.pcap", chunk_bytes=4096):
                conv.add_batch(batch)
            raise KeyboardInterrupt

    if not (DATA / "zeek").exists():
        pytest.skip("shared captures not here")
    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert not out.exists()
    assert [p.name for p in tmp_path.rglob("*") if p.name.endswith(".partial")] == []
    # What was published before stays: whole parts, in order.
    assert len(list(parts.iterdir())) > 3
    assert all(tracefmt.read_trace(p).num_rows for p in parts.iterdir())


def test_empty_input_has_every_column(tmp_path: Path) -> None:
    out, parts = tmp_path / "t.parquet", tmp_path / "t"
    with StreamConverter(out, parts_dir=parts) as conv:
        conv.add_source(FakeSource([]))
        assert conv.finish().messages == 0
    assert (
        tracefmt.read_trace(out).column_names
        == tracefmt.read_trace(parts / "part-00000.parquet").column_names
    )


def test_a_growing_file_is_read_as_it_is_written(tmp_path: Path) -> None:
    """The live agent's reader of a file tcpdump still writes: records cut anywhere by the
    writer's pace are whole in the batches, and the file ends only once it is finished."""
    import threading
    import time

    from capture.live import _Growing
    from capture.source import PcapSource

    src = (ROOT / "samples" / "testbed" / "web.pcap").read_bytes()
    path = tmp_path / "c.pcap"
    path.write_bytes(b"")
    done, cancel = threading.Event(), threading.Event()

    def write() -> None:
        with open(path, "ab") as fh:
            for k in range(0, len(src), 7001):  # cuts through headers and records
                fh.write(src[k : k + 7001])
                fh.flush()
                time.sleep(0.01)
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    stream = _Growing(path, done.is_set, cancel)
    batches = [len(b) for b in PcapSource(stream, chunk_bytes=8192)]
    writer.join()
    assert sum(batches) == sum(len(b) for b in read_packets(ROOT / "samples" / "testbed" / "web.pcap"))
    assert len(batches) > 1


def test_a_quiet_line_still_gets_its_part_written(tmp_path: Path) -> None:
    """Traffic stops before the next part is due: the messages already final still reach a
    part while the file stays open and nothing new arrives (not only with the next packet)."""
    import threading
    import time

    from capture.live import _Growing
    from capture.source import PcapSource

    path = tmp_path / "c.pcap"
    path.write_bytes((ROOT / "samples" / "testbed" / "web.pcap").read_bytes())  # all at once, then quiet
    parts = tmp_path / "parts"
    conv = StreamConverter(tmp_path / "t.parquet", parts_dir=parts, part_every_s=1.0)
    done, cancel = threading.Event(), threading.Event()
    stream = _Growing(path, done.is_set, cancel, idle=conv.flush_parts_if_due)
    reader = threading.Thread(target=conv.add_source, args=(PcapSource(stream),))
    reader.start()
    try:
        deadline = time.monotonic() + 20
        while not list(parts.glob("part-*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.05)
        # The file is still open (not finished): only the idle flush can have written it.
        assert reader.is_alive()
        written = list(parts.glob("part-*.parquet"))
        assert written, "no part while the line was quiet"
        assert ds.dataset(parts, format="parquet").count_rows() > 0
    finally:
        done.set()
        reader.join(30)
    conv.finish()
    whole = tracefmt.read_trace(tmp_path / "t.parquet").num_rows
    assert ds.dataset(parts, format="parquet").count_rows() == whole


def test_connection_in_two_files_is_reassembled_once(tmp_path: Path) -> None:
    """A keep-alive connection cut by a rotation: one connection, every call paired."""
    path = DATA / "zeek" / "http_1000-requests-one-dropped-response.pcap"
    if not path.exists():
        pytest.skip("shared captures not here")
    pieces = split_capture(path, tmp_path, 2)
    report = capture.convert_pcaps(pieces, tmp_path / "t.parquet")
    whole = capture.convert_pcaps([path], tmp_path / "w.parquet")
    assert report.connections == whole.connections
    # Each piece on its own sees the connection cut in two.
    alone = [capture.convert_pcaps([p], tmp_path / f"p{k}.parquet") for k, p in enumerate(pieces)]
    assert sum(r.connections for r in alone) > whole.connections
    assert _rows(tmp_path / "t.parquet") == _rows(tmp_path / "w.parquet")


def test_an_empty_last_rotation_keeps_the_trace(tmp_path: Path) -> None:
    """The recorder opened one more rotation and died before writing its header (killed,
    disk full): the files before it still make the trace, and the damage is reported."""
    from types import SimpleNamespace

    from capture.live import _Following

    source = DATA / "zeek" / "http_methods.pcap"
    if not source.exists():
        pytest.skip("shared captures not here")
    first = tmp_path / "capture.pcap"
    first.write_bytes(source.read_bytes())
    (tmp_path / "capture.pcap1").write_bytes(b"")
    (tmp_path / "trace.parquet").write_bytes(b"an earlier run's trace")
    following = _Following(SimpleNamespace(out_dir=tmp_path, first_file=first), names=None, options={})
    assert not (tmp_path / "trace.parquet").exists()  # never passes for this run's
    report = following.finish(provenance={})
    whole = capture.convert_pcaps([source], tmp_path / "w.parquet")
    assert report.messages == whole.messages > 0
    assert any("capture.pcap1" in d and "empty" in d for d in report.damage)
    assert tracefmt.read_trace(tmp_path / "trace.parquet").num_rows == whole.messages


def test_parts_directory_is_not_writable_by_others(tmp_path: Path) -> None:
    import os

    old = os.umask(0)
    try:
        with StreamConverter(tmp_path / "t.parquet", parts_dir=tmp_path / "t") as conv:
            conv.finish()
    finally:
        os.umask(old)
    assert (tmp_path / "t").stat().st_mode & 0o022 == 0


def test_the_parts_directory_is_read_as_the_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Every reader (and so every verb) takes the parts directory as the trace itself."""
    from wirepath.cli import main

    source = DATA / "zeek" / "http_methods.pcap"
    if not source.exists():
        pytest.skip("shared captures not here")
    out, parts = tmp_path / "t.parquet", tmp_path / "t"
    with StreamConverter(out, parts_dir=parts, part_every_s=0.0) as conv:
        for batch in read_packets(source, chunk_bytes=4096):
            conv.add_batch(batch)
        conv.finish()
    assert len(tracefmt.trace_parts(parts)) > 3
    whole = tracefmt.read_trace(out)
    assert tracefmt.read_trace(parts).equals(whole)
    assert sum(b.num_rows for b in tracefmt.iter_trace(parts, batch_size=7)) == whole.num_rows
    assert tracefmt.read_trace_metadata(parts).messages == whole.num_rows
    assert main(["convert", str(parts), str(tmp_path / "copy.parquet"), "--quiet"]) == 0
    assert tracefmt.read_trace(tmp_path / "copy.parquet").equals(whole)
    assert main(["infer", "nesting", str(parts), "--out", str(tmp_path / "p.json")]) == 0
    # Several traces side by side in a directory are not one.
    with pytest.raises(tracefmt.TraceFileError, match="without trace parts"):
        tracefmt.read_trace(tmp_path)
    capsys.readouterr()
    assert main(["info", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {tmp_path}: a directory without trace parts (part-*.parquet files)"]


# ---- pooled traffic: connections open for the whole recording ----------------------------------
_MS = 1_000_000
_T0 = 1_700_000_000 * 10**9


# Connections opened when the recording starts and never closed: (client, server, port,
# period in ms, the i-th request and response).
_POOL = [
    (0x0A000101, 0x0A000201, 8080, 50, lambda i: (b"GET /pool/%d HTTP/1.1\r\nHost: a\r\n\r\n" % i,
                                                  b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")),
    (0x0A000102, 0x0A000202, 6379, 70, lambda i: (b"*2\r\n$3\r\nGET\r\n$9\r\nkey:%05d\r\n" % i,
                                                  b"$40\r\n" + b"v" * 40 + b"\r\n")),
    (0x0A000103, 0x0A000203, 7777, 90, lambda i: (bytes([1, 2, 3, i % 251]) * 10, bytes([9, 8, 7]) * 20)),
]  # fmt: skip


def pooled_capture(path: Path, seconds: float) -> None:
    """A pcap of pooled traffic: an HTTP/1.1, a Redis and a binary-protocol connection
    opened at the start and open to the end, each making a call every 50, 70 and 90 ms,
    and a short HTTP connection (handshake, one call, close) every 20 ms."""
    out: list[tuple[int, bytes]] = []
    end = _T0 + int(seconds * 1e9)
    for cli, srv, port, every, message in _POOL:
        c = TcpConnection(out, cli, srv, 40000, port)
        c.open(_T0)
        for i, t in enumerate(range(_T0 + _MS, end, every * _MS)):
            c.turn(t, *message(i))
    for i, t in enumerate(range(_T0 + 3 * _MS, end - 2 * _MS, 20 * _MS)):
        c = TcpConnection(out, 0x0A000109, 0x0A000209, 20000 + i, 80, isn=7000 + i)
        c.open(t)
        c.turn(t + _MS * 3 // 10, b"GET /short/%d HTTP/1.1\r\nHost: b\r\n\r\n" % i,
               b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")  # fmt: skip
        c.close(t + _MS)
    out.sort(key=lambda p: p[0])
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1))
        f.writelines(struct.pack("<IIII", t // 10**9, t % 10**9, len(b), len(b)) + b for t, b in out)


def _published(parts: Path) -> list[tuple]:
    """The rows of the parts published so far, in order."""
    return [r for p in sorted(parts.glob("part-*.parquet")) for r in _rows(p)]


def test_pooled_connections_are_published_while_they_stay_open(tmp_path: Path) -> None:
    """Connections that stay open for the whole recording hold back neither their own
    finished calls nor anybody else's: parts come out as the rotations come in, each a
    prefix of the one-pass trace, about as late as a call lasts, not at the stop."""
    whole = tmp_path / "pool.pcap"
    pooled_capture(whole, seconds=8)
    ref_report = capture.convert_pcaps([whole], tmp_path / "ref.parquet")
    ref = _rows(tmp_path / "ref.parquet")
    ref_ts = np.array([r[0] for r in ref])
    assert ref_report.connections == 3 + 400
    assert ref_report.messages == len(ref)
    pieces = split_capture(whole, tmp_path, 8)
    out, parts = tmp_path / "t.parquet", tmp_path / "t"
    seen = []
    with StreamConverter(out, parts_dir=parts, part_every_s=0.0) as conv:
        for piece in pieces:
            conv.add_source(read_packets(piece))
            newest = max(int(b.ts_ns.max()) for b in read_packets(piece))
            seen.append((newest, _published(parts)))
        conv.finish()
    for k, (newest, rows) in enumerate(seen):
        assert rows == ref[: len(rows)]  # the one-pass trace, in order, as far as published
        if k:
            assert len(rows) > len(seen[k - 1][1])
        # Every message older than half a second is out (calls come every 20-90 ms; the
        # protocols of the open connections are known after their first second).
        if newest - _T0 > 2 * 10**9:
            assert len(rows) >= np.searchsorted(ref_ts, newest - 5 * 10**8)
    before_stop = seen[-2][1]
    names = pq.read_schema(out).names
    labels = [r[names.index("label")] or "" for r in before_stop]
    protos = {r[names.index("proto")] for r in before_stop}
    assert any(lab.startswith("GET /pool/") for lab in labels)
    assert any(lab.startswith("GET /short/") for lab in labels)
    assert {"redis", "tcp"} <= protos
    assert _rows(out) == ref
    capture.convert_pcaps(pieces, tmp_path / "pieces.parquet")
    assert _rows(tmp_path / "pieces.parquet") == ref


def test_held_messages_stay_bounded_while_connections_stay_open(tmp_path: Path) -> None:
    """Messages not yet final are those of the last tenths of a second, however long the
    open connections last (about 190 messages a second here)."""
    whole = tmp_path / "pool.pcap"
    pooled_capture(whole, seconds=20)
    held = []
    with StreamConverter(tmp_path / "t.parquet") as conv:
        for batch in read_packets(whole, chunk_bytes=1 << 15):  # about half a second each
            conv.add_batch(batch)
            held.append(conv.held)
        report = conv.finish()
    assert report.messages > 3500
    assert len(held) >= 25
    # After the first second (the open connections' protocols are known by then), at
    # most a tenth of a second's worth; before it, at most that second's.
    assert max(held[2:]) <= 20
    assert max(held) <= 200
    assert _rows(tmp_path / "t.parquet") == _rows_of_one_pass(whole, tmp_path)


def _rows_of_one_pass(path: Path, tmp_path: Path) -> list[tuple]:
    capture.convert_pcaps([path], tmp_path / "one.parquet")
    return _rows(tmp_path / "one.parquet")
