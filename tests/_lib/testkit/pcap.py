"""Captures written by hand, and what tshark (the reference dissector) reads in them."""

from __future__ import annotations

import contextlib
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[3]
#: The real captures beside the project (``../shared/data/pcaps``; in a clone elsewhere,
#: where they stay at /work/shared).
SHARED_PCAPS = _ROOT.parent / "shared" / "data" / "pcaps"
if not SHARED_PCAPS.is_dir():
    SHARED_PCAPS = Path("/work/shared/data/pcaps")
#: Every shared capture (pcap and pcapng), empty when they are not present.
SHARED = (
    sorted(p for p in SHARED_PCAPS.glob("*/*") if p.suffix in (".pcap", ".pcapng"))
    if SHARED_PCAPS.is_dir()
    else []
)
#: The project's own captures: the recorded testbed's and the tests' small ones.
OURS = sorted((_ROOT / "samples" / "testbed").glob("*.pcap")) + sorted(
    (_ROOT / "tests" / "capture" / "data").glob("*.pcap")
)

#: pcap link types the tests write.
ETHERNET = 1
RAW_IP = 101


def write_pcap(path: Path, packets: list[tuple[int, bytes]], linktype: int = ETHERNET) -> Path:
    """A nanosecond pcap of ``(timestamp ns, frame)`` packets in time order (written by
    hand: dpkt takes float seconds, off by ~100 ns)."""
    out = [struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, linktype)]
    for ts, frame in sorted(packets, key=lambda p: p[0]):
        out.append(struct.pack("<IIII", *divmod(ts, 1_000_000_000), len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))
    return path


def tshark_rows(pcap: Path, display: str, *fields: str, options: tuple[str, ...] = ()) -> list[list[str]]:
    """``fields`` of every packet tshark shows for the display filter ``display``, one list
    per packet (``options``: more tshark arguments, e.g. ``-d`` decode-as rules)."""
    cmd = ["tshark", "-n", "-r", str(pcap), *options, "-Y", display, "-T", "fields", "-E", "separator=|"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines()]


def epoch_ns(epoch: str) -> int:
    """tshark's ``frame.time_epoch`` text as integer nanoseconds (no float rounding).

    >>> epoch_ns("1700000000.000000123")
    1700000000000000123
    """
    sec, _, frac = epoch.partition(".")
    return int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port of the loopback no socket of ``kind`` holds now."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_recording(pcap: Path, bpf: str) -> Iterator[None]:
    """Record the loopback's traffic that ``bpf`` selects (tcpdump) into ``pcap`` while
    the block runs; the capture is running when the block starts."""
    proc = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-w", str(pcap), bpf],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    line = proc.stderr.readline()  # "listening on lo, ..." once the capture runs
    assert "listening" in line, line
    try:
        yield
    finally:
        time.sleep(0.3)  # the last packets' trip through the ring
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        proc.stderr.close()
