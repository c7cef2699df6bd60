"""Fuzzing the readers of untrusted input: mutated captures (pcap and pcapng), text traces
and paths files, and random bytes into every protocol parser, for a time budget.

    python benchmarks/fuzz.py [--seconds 120] [--seed 1]

Each input is derived from a real one (the testbed's and the tests' captures, the same
captures rewritten as pcapng with interface options at their edges: every kind of
``if_tsresol`` from 1 s to the finest and past it, ``if_tsoffset`` far either way, both
byte orders, several sections; a sample text trace, a paths file inferred from it) by bit
flips, byte changes, truncation, duplication and splicing, or is random bytes for the
protocol parsers. A target passes
when it returns or raises one of wirepath's own errors (one clear line for the user);
anything else is a crash, a run longer than ``HANG_S`` a hang. Every crasher and hang is
written to ``tests/fuzz_corpus/<target>/`` (named by its hash), where
``tests/wirepath/test_fuzz_corpus.py`` replays it on every test run. Prints executions,
crashes and hangs per target.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import signal
import struct
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import capture  # noqa: E402
import tracefmt  # noqa: E402
from capture.protocols import PROTOCOLS, parse_dns_datagram, parse_stream  # noqa: E402
from tracefmt import read_paths  # noqa: E402

ROOT = HERE.parent
CORPUS = ROOT / "tests" / "fuzz_corpus"
HANG_S = 5


class HangError(Exception):
    """A target ran past ``HANG_S``."""


def _alarm(signum: int, frame: object) -> None:
    raise HangError


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to eight random edits of ``data``."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if not b:
            b = bytearray(rng.randbytes(rng.randint(1, 64)))
        op = rng.randrange(6)
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
        elif op == 2:
            del b[i:]
        elif op == 3:
            j = min(len(b), i + rng.randint(1, 64))
            b[i:i] = b[i:j]
        elif op == 4:
            b[i : i + 4] = rng.choice((b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x7f\xff\xff\xff"))
        else:
            j = rng.randrange(len(b))
            b[i:i] = b[j : j + rng.randint(1, 256)]
    return bytes(b)


def _pcap_target(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.pcap"
        src.write_bytes(data)
        capture.convert_pcaps([src], Path(d) / "t.parquet")


def _text_target(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.txt"
        src.write_bytes(data)
        tracefmt.read_text_trace(src)


def _paths_target(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "p.json"
        src.write_bytes(data)
        doc = read_paths(src)
        if doc.get("algorithm") == "nesting":
            from viz.dot import paths_dot

            paths_dot(doc)


def _protocol_target(data: bytes) -> None:
    proto = PROTOCOLS[data[0] % len(PROTOCOLS)] if data else "tcp"
    for direction in (0, 1):
        parse_stream(proto, data[1:], direction, {})
    parse_dns_datagram(data, any_port=True)
    parse_dns_datagram(data, cut=True)


def _pcapng_target(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in.pcapng"
        src.write_bytes(data)
        capture.convert_pcaps([src], Path(d) / "t.parquet")


TARGETS: dict[str, Callable[[bytes], None]] = {
    "pcap": _pcap_target,
    "pcapng": _pcapng_target,
    "text": _text_target,
    "paths": _paths_target,
    "protocols": _protocol_target,
}


def _pcapng_block(btype: int, body: bytes, bo: str) -> bytes:
    n = 12 + len(body) + (-len(body)) % 4
    return struct.pack(bo + "II", btype, n) + body + b"\0" * ((-len(body)) % 4) + struct.pack(bo + "I", n)


def _pcapng_option(code: int, value: bytes, bo: str) -> bytes:
    return struct.pack(bo + "HH", code, len(value)) + value + b"\0" * ((-len(value)) % 4)


def as_pcapng(
    pcap: bytes, *, tsresol: int | None, tsoffset: int | None, bo: str = "<", sections: int = 1
) -> bytes:
    """A little-endian microsecond pcap's records as a pcapng file: ``sections`` sections,
    each with one interface of those options and the records as enhanced packet blocks
    (ticks scaled to the resolution where it is a power of ten up to 10^-9)."""
    linktype = struct.unpack_from("<I", pcap, 20)[0] & 0xFFFF
    opts = b""
    if tsresol is not None:
        opts += _pcapng_option(9, bytes([tsresol]), bo)
    if tsoffset is not None:
        opts += _pcapng_option(14, struct.pack(bo + "q", tsoffset), bo)
    if opts:
        opts += _pcapng_option(0, b"", bo)
    exp = 6 if tsresol is None else tsresol
    scale = 10 ** (exp - 6) if exp <= 9 else 1
    records, off = [], 24
    while off + 16 <= len(pcap):
        sec, usec, cap, wire = struct.unpack_from("<IIII", pcap, off)
        ticks = ((sec * 10**6 + usec) * scale if exp >= 6 else sec) & (2**64 - 1)
        body = struct.pack(bo + "IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, cap, wire)
        records.append(_pcapng_block(6, body + pcap[off + 16 : off + 16 + cap], bo))
        off += 16 + cap
    out = []
    per = max(1, len(records) // sections)
    for k in range(sections):
        out.append(_pcapng_block(0x0A0D0D0A, struct.pack(bo + "IHHq", 0x1A2B3C4D, 1, 0, -1), bo))
        out.append(_pcapng_block(1, struct.pack(bo + "HHI", linktype, 0, 0) + opts, bo))
        out += records[k * per : (k + 1) * per if k < sections - 1 else None]
    return b"".join(out)


#: Interface options at their edges: (if_tsresol, if_tsoffset, byte order, sections).
PCAPNG_EDGES = [
    (None, None, "<", 1),
    (6, None, ">", 1),
    (9, None, "<", 3),
    (0, None, "<", 1),  # 1 s ticks, given microsecond counts: far future
    (18, None, "<", 1),
    (19, None, "<", 1),
    (0x7F, None, "<", 1),
    (0x80 | 20, None, "<", 1),
    (0x80 | 60, None, "<", 1),
    (0x80 | 63, None, "<", 1),
    (0xFF, None, ">", 1),
    (None, -(2**40), "<", 1),
    (None, 2**33, "<", 2),
    (None, -(2**63), "<", 1),
    (9, 2**63 - 1, ">", 1),
]


def seeds() -> dict[str, list[bytes]]:
    """Real inputs to mutate, per target."""
    pcaps = [p.read_bytes() for p in sorted((ROOT / "tests" / "capture" / "data").glob("*.pcap"))]
    pcaps += [p.read_bytes()[:20_000] for p in sorted((ROOT / "samples" / "testbed").glob("*.pcap"))]
    little = [p for p in pcaps if p[:4] == b"\xd4\xc3\xb2\xa1"]
    pcapngs = [
        as_pcapng(little[k % len(little)][:8_000], tsresol=r, tsoffset=o, bo=bo, sections=s)
        for k, (r, o, bo, s) in enumerate(PCAPNG_EDGES)
    ]
    text = (ROOT / "samples" / "multitier.txt").read_bytes()[:20_000]
    import infer

    trace = tracefmt.read_text_trace(ROOT / "samples" / "multitier.txt")
    paths = json.dumps(infer.infer_nesting(trace, calibrate=False).to_json(top=3)).encode()
    return {
        "pcap": pcaps,
        "pcapng": pcapngs,
        "text": [text],
        "paths": [paths],
        "protocols": [b"\x00" + p[:600] for p in pcaps],
    }


def run_one(target: str, data: bytes) -> str | None:
    """``None`` when the target passes, else "crash: ..." or "hang"."""
    signal.alarm(HANG_S)
    try:
        TARGETS[target](data)
    except tracefmt.WirepathError:
        return None
    except HangError:
        return "hang"
    except Exception:
        return "crash: " + traceback.format_exc().strip().splitlines()[-1]
    finally:
        signal.alarm(0)
    return None


def keep(target: str, data: bytes) -> Path:
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(data).hexdigest()[:16]}.bin"
    path.write_bytes(data)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    signal.signal(signal.SIGALRM, _alarm)
    pool = seeds()
    counts = {t: {"runs": 0, "crashes": 0, "hangs": 0} for t in TARGETS}
    found: list[str] = []
    end = time.monotonic() + args.seconds
    names = list(TARGETS)
    while time.monotonic() < end:
        target = names[rng.randrange(len(names))]
        if target == "protocols" and rng.random() < 0.5:
            data = rng.randbytes(rng.randint(0, 400))
        else:
            data = mutate(rng.choice(pool[target]), rng)
        counts[target]["runs"] += 1
        verdict = run_one(target, data)
        if verdict is not None:
            counts[target]["hangs" if verdict == "hang" else "crashes"] += 1
            found.append(f"{target}: {verdict} -> {keep(target, data).relative_to(ROOT)}")
    print(
        f"fuzzing for {args.seconds:g} s (seed {args.seed}); a target passes on success or a wirepath error"
    )
    print(f"{'target':<10} {'runs':>8} {'crashes':>8} {'hangs':>6}")
    for t, c in counts.items():
        print(f"{t:<10} {c['runs']:>8,} {c['crashes']:>8} {c['hangs']:>6}")
    for line in found[:40]:
        print(line)


if __name__ == "__main__":
    main()
