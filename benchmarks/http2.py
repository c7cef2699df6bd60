"""HTTP/2 message parsing: the cost of labelling each stream from its HPACK-decoded headers.

One client direction of 20,000 gRPC requests (HEADERS + DATA each, 20 distinct methods,
header fields reused through the HPACK dynamic table, as real clients send them), parsed
by ``capture.protocols.parse_stream`` twice in one run: as wirepath does (framing and
HPACK decoding), and with the header decoding switched off (framing alone, labels
``stream N``), the baseline. ``--seen-from K`` parses only the requests from the K-th
on, as a capture that began after the connection did (the first K requests' table
entries never seen).

    .venv/bin/python benchmarks/http2.py [--requests 20000] [--seen-from K]
"""

from __future__ import annotations

import argparse
import struct
import time
from unittest import mock

from hpack import Encoder

import capture.protocols as protocols
import capture.protocols.http2 as h2

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def _frame(typ: int, flags: int, sid: int, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([typ, flags]) + struct.pack(">I", sid) + payload


def client_stream(requests: int, seen_from: int = 0) -> bytes:
    enc = Encoder()
    parts = [PREFACE]
    for i in range(requests):
        sid = 2 * i + 1
        block = enc.encode(
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", f"/shop.Cart/Method{i % 20}"),
                ("te", "trailers"),
            ]
        )
        parts.append(_frame(1, 0x4, sid, block) + _frame(0, 0x1, sid, b"\x00\x00\x00\x00\x02hi"))
    if seen_from:
        del parts[: seen_from + 1]  # the preface and the first requests: before the capture
    return b"".join(parts)


def _framing_only(self: h2._HeaderBlocks, fragment: bytes, last: bool, starts: bool) -> None:
    """Header blocks left undecoded: every stream keeps the label ``stream N``."""
    return None


def best_of(runs: int, buf: bytes) -> tuple[float, list]:
    best, msgs = float("inf"), []
    for _ in range(runs):
        t0 = time.perf_counter()
        msgs = protocols.parse_stream("http2", buf, 0, {})
        best = min(best, time.perf_counter() - t0)
    return best, msgs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--seen-from", type=int, default=0, help="drop the requests before this one")
    args = ap.parse_args()
    buf = client_stream(args.requests, args.seen_from)
    labelled_s, msgs = best_of(3, buf)
    with mock.patch.object(h2._HeaderBlocks, "add", _framing_only):
        framing_s, plain = best_of(3, buf)
    seen = args.requests - args.seen_from
    assert len(msgs) == len(plain) == seen
    labelled = sum(not m[2].startswith("stream ") for m in msgs)
    print(f"{seen:,} requests, {len(buf):,} bytes; best of three runs each; {labelled:,} labelled")
    print(f"{'':<38} {'seconds':>8} {'us/request':>11}  label of the first")
    for name, s, m in (
        ("framing and HPACK labels (wirepath)", labelled_s, msgs),
        ("framing only", framing_s, plain),
    ):
        print(f"{name:<38} {s:>8.3f} {s / len(m) * 1e6:>11.1f}  {m[0][2]}")


if __name__ == "__main__":
    main()
