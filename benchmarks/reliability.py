"""Reliability figures: hostile inputs per verb, fuzzing, faults survived, load held.
Writes docs/reliability.md.

    python benchmarks/reliability.py [--fuzz-seconds 120] [--sizes 1,2,5] [--skip load]

Four parts, each measured, none assumed:

- **hostile inputs**: every verb run as a user runs it (its own process) on inputs a
  careless or hostile user gives it (broken captures, out-of-range numbers, malformed
  paths files, outputs naming inputs, names with terminal escapes); what each got: the
  exit status and its one ``error:`` line, or the escaped output;
- **fuzzing**: ``benchmarks/fuzz.py`` for ``--fuzz-seconds``: executions, crashes, hangs;
- **faults**: ``FAULT_TESTS`` run whole (a full disk, SIGTERM and SIGKILL mid-run, the
  live agent killed mid-capture; outputs that are devices, FIFOs, links, bind mounts of
  inputs or inside input datasets, two writers at once, a permissive umask; odd inputs:
  endless or deeply nested configurations, symlink loops, hand-edited paths files, call
  chains thousands deep, pcapng options out of range, hostile names; a late signal); one
  row per test;
- **load**: peak RSS and time of converting generated captures of growing size, of
  ``synth`` at growing sizes, and of ``infer nesting`` at ``--sizes`` million messages
  (with and without calibration), with a straight line through them; then the sizes the
  goals ask for, measured whole: a capture of ``--big-capture-gb`` (part ``big``) and
  ``infer nesting`` on ``--big-infer-m`` million messages (part ``biginfer``). Every
  measured process is stopped at ``--rss-cap-gb``.

Every process runs in a scratch directory (``build/reliability-*``, removed at the end
unless ``--keep``); the figures go to ``build/reliability.json`` as each part ends, and
``--skip`` keeps a skipped part's figures from there (``--from-figures`` only rewrites the
page).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BIN = [sys.executable, "-m", "wirepath"]
CONFIG = ROOT / "samples" / "synth" / "multitier.toml"
SAMPLE_PCAP = ROOT / "samples" / "testbed" / "web.pcap"

# --- measuring one process ------------------------------------------------------------

#: Runs argv, polling its peak RSS (VmHWM) and stopping it past the cap; prints JSON.
_MEASURE = r"""
import json, os, signal, subprocess, sys, time
cap_kb = int(sys.argv[1]); argv = sys.argv[2:]
t0 = time.monotonic()
p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak, capped = 0, False
import threading
err = []
reader = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
reader.start()
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
    except OSError:
        pass
    if peak > cap_kb and not capped:
        capped = True
        p.send_signal(signal.SIGKILL)
    time.sleep(0.05)
wall = time.monotonic() - t0
import resource
peak = max(peak, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
reader.join(10)
tail = (err[0] if err else b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
print(json.dumps({"rc": p.returncode, "wall_s": wall, "rss_mb": peak / 1024, "capped": capped,
                  "err": tail[0]}))
"""


def measure(argv: list[str], cap_gb: float, cwd: Path) -> dict[str, Any]:
    """Wall time, peak RSS (MB) and exit status of one process (stopped past ``cap_gb``)."""
    cmd = [sys.executable, "-c", _MEASURE, str(int(cap_gb * 1024 * 1024)), *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- hostile inputs ---------------------------------------------------------------------


@dataclass
class Case:
    """One hostile invocation: what a user typed and what must come of it."""

    verb: str
    what: str
    argv: list[str]
    expect: str = "error"  # error: one error line, exit != 0; escaped: exit 0, no raw control bytes
    check: Any = None  # extra check of the outputs, returns "" or what is wrong
    result: dict[str, Any] = field(default_factory=dict)


_ESCAPE = "\x1b[31mEVIL\x1b]0;pwned\x07"


def _hostile_files(d: Path) -> None:
    """The inputs of the hostile cases, made in ``d``."""
    import pyarrow as pa

    import tracefmt

    run = [*BIN, "synth", str(CONFIG), "--messages", "4000", "--out", str(d / "t.parquet")]
    subprocess.run([*run, "--pcap", str(d / "t.pcap")], check=True, capture_output=True)
    subprocess.run(
        [
            *BIN,
            "infer",
            "nesting",
            str(d / "t.parquet"),
            "--no-calibrate",
            "--out",
            str(d / "p.json"),
            "--instances",
            str(d / "i.parquet"),
        ],
        check=True,
        capture_output=True,
    )
    shutil.copy(CONFIG, d / "cfg.toml")
    pcap = (d / "t.pcap").read_bytes()[:200_000]
    (d / "cut.pcap").write_bytes(pcap[: len(pcap) // 2 + 7])
    (d / "empty.pcap").write_bytes(b"")
    (d / "random.pcap").write_bytes(os.urandom(4096))
    (d / "huge-length.pcap").write_bytes(pcap[:24] + b"\0" * 8 + b"\xff\xff\xff\x7f" * 2 + b"x" * 64)
    gz = gzip.compress(pcap)
    (d / "cut.pcap.gz").write_bytes(gz[: len(gz) // 2])
    (d / "crc.pcap.gz").write_bytes(gz[:-8] + bytes(b ^ 0xFF for b in gz[-8:-4]) + gz[-4:])
    (d / "bom.txt").write_bytes("\ufeff1.0 call a b 1\n1.5 return b a 1\n".encode())
    (d / "bad-op.txt").write_text("1.0 cal a b 1\n")
    trace = (d / "t.parquet").read_bytes()
    mid = len(trace) // 3
    (d / "corrupt.parquet").write_bytes(
        trace[:mid] + bytes(b ^ 0x5A for b in trace[mid : mid + 60]) + trace[mid + 60 :]
    )
    doc = json.loads((d / "p.json").read_text())
    pats = doc["patterns"]

    def variant(name: str, change: Any) -> None:
        v = json.loads(json.dumps(doc))
        change(v)
        (d / name).write_text(json.dumps(v, allow_nan=True))

    variant("children-x.json", lambda v: v["patterns"][0]["root"].__setitem__("children", "x"))
    variant("count-many.json", lambda v: v["patterns"][0].__setitem__("count", "many"))
    variant(
        "nan-latency.json", lambda v: v["patterns"][0]["root"].__setitem__("latency_s", {"mean": math.nan})
    )
    # A tree past the deepest a paths file holds, 20,001 levels (written as text: json itself
    # would recurse that deep); 3,000 levels, a real call chain's depth, is drawn.
    node = '{"caller": "a", "callee": "b", "latency_s": {"mean": 0.001}, "children": ['
    variant("deep.json", lambda v: v["patterns"][0].__setitem__("root", "DEEP"))
    text = (d / "deep.json").read_text()
    (d / "deep.json").write_text(text.replace('"DEEP"', node * 20_001 + "]}" * 20_001))
    (d / "not-json.json").write_text('{"patterns": [')
    assert pats
    # A trace whose node names carry terminal escapes and a fake output row.
    # Three requests, each client -> NAME -> DB, for three names: one with a terminal
    # escape and a bell, one with a newline faking an output row, one with markup.
    names = [_ESCAPE, "ok\nfake row  999", "<script>x</script>&"]
    sender, receiver, ids = [], [], []
    for g, name in enumerate(names * 4):
        sender += ["client", name, "DB", name]
        receiver += [name, "DB", name, "client"]
        ids += [2 * g, 2 * g + 1, 2 * g + 1, 2 * g]
    tab = pa.table(
        {
            "timestamp": pa.array([1_000_000 * k for k in range(len(ids))], pa.int64()).cast(
                pa.timestamp("ns", tz="UTC")
            ),
            "sender": sender,
            "receiver": receiver,
            "op": ["call", "call", "return", "return"] * (len(ids) // 4),
            "id": pa.array(ids, pa.uint64()),
        }
    )
    tracefmt.write_trace(tab, d / "hostile.parquet")
    (d / "store-file").write_text("x")
    (d / "results.csv").write_text("test,build,time,value\nip4,b1,2024-05-01T02:00:00Z,1e400\n")
    (d / "good.csv").write_text("test,build,time,value\nip4,b1,2024-05-01T02:00:00Z,10\n")
    (d / "results-time.csv").write_text("test,build,time,value\nip4,b1,1e20,10\n")
    (d / "demo-file").write_text("x")
    (d / "deep.toml").write_text(
        (d / "cfg.toml")
        .read_text()
        .replace('to = ["DB1", "DB2"]', 'to = ["DB1", "DB2"]\nrepeat = 1000000000')
    )


def _svg_is_xml(path: Path) -> str:
    try:
        ET.parse(path)
    except (ET.ParseError, OSError) as exc:
        return f"SVG not well-formed: {exc}"
    return ""


def hostile_cases(d: Path) -> list[Case]:
    """Each verb fed what the hostile-input probe of issue 16 fed it, and more."""
    t, p, i, cfg = str(d / "t.parquet"), str(d / "p.json"), str(d / "i.parquet"), str(d / "cfg.toml")
    o = str(d / "out")
    synth = ["synth", cfg, "--out", f"{o}.parquet"]
    c = [
        Case("convert", "empty input file", ["convert", str(d / "empty.pcap"), f"{o}.parquet"]),
        Case("convert", "unknown op 'cal'", ["convert", str(d / "bad-op.txt"), f"{o}.parquet"]),
        Case("convert", "UTF-8 byte order mark", ["convert", str(d / "bom.txt"), f"{o}.parquet"], "ok"),
        Case(
            "convert",
            "60 corrupted bytes in a data page",
            ["convert", str(d / "corrupt.parquet"), f"{o}.txt"],
        ),
        Case("convert", "output is the input", ["convert", t, t]),
        Case("convert", "output names a directory", ["convert", t, str(d)]),
        Case("convert", "output ''", ["convert", t, ""]),
        Case("convert", "a 300-character output name", ["convert", t, str(d / ("x" * 300 + ".parquet"))]),
        Case(
            "merge",
            "--dedup-window 1e400s",
            ["merge", t, t, "--dedup-window", "1e400s", "--out", f"{o}.parquet"],
        ),
        Case(
            "merge",
            "--offset t.parquet=1e10s",
            ["merge", t, "--offset", "t.parquet=1e10s", "--out", f"{o}.pq"],
        ),
        Case("merge", "--out x.txt (Parquet under a text name)", ["merge", t, "--out", f"{o}.txt"]),
        Case("merge", "--names a directory", ["merge", t, "--names", str(d), "--out", f"{o}.parquet"]),
        Case("info", "--edges -1", ["info", t, "--edges", "-1"]),
        Case("info", "node names with terminal escapes", ["info", str(d / "hostile.parquet")], "escaped"),
        Case(
            "capture pcap",
            "random bytes",
            ["capture", "pcap", str(d / "random.pcap"), "--out", f"{o}.parquet"],
        ),
        Case(
            "capture pcap", "empty file", ["capture", "pcap", str(d / "empty.pcap"), "--out", f"{o}.parquet"]
        ),
        Case(
            "capture pcap",
            "cut in a record",
            ["capture", "pcap", str(d / "cut.pcap"), "--out", f"{o}.pq"],
            "ok",
        ),
        Case(
            "capture pcap",
            "a record claiming 2 GB",
            ["capture", "pcap", str(d / "huge-length.pcap"), "--out", f"{o}.parquet"],
            "ok",
        ),
        Case(
            "capture pcap", "cut .gz", ["capture", "pcap", str(d / "cut.pcap.gz"), "--out", f"{o}.pq"], "ok"
        ),
        Case(
            "capture pcap",
            "CRC-damaged .gz",
            ["capture", "pcap", str(d / "crc.pcap.gz"), "--out", f"{o}.pq"],
            "ok",
        ),
        Case(
            "capture pcap",
            "--out the capture",
            ["capture", "pcap", str(d / "t.pcap"), "--out", str(d / "t.pcap")],
        ),
        Case(
            "capture pcap",
            "--names a directory",
            ["capture", "pcap", str(d / "t.pcap"), "--names", str(d), "--out", f"{o}.pq"],
        ),
        Case("synth", "--messages 10**12", [*synth, "--messages", str(10**12)]),
        Case("synth", "--messages 0", [*synth, "--messages", "0"]),
        Case("synth", "--parallelism 1e8", [*synth, "--parallelism", "1e8"]),
        Case("synth", "--parallelism inf", [*synth, "--parallelism", "inf"]),
        Case("synth", "--duration 1e400s", [*synth, "--duration", "1e400s"]),
        Case("synth", "--loss-rate -1", [*synth, "--loss-rate", "-1"]),
        Case("synth", "--skew WS1=1e12s", [*synth, "--skew", "WS1=1e12s"]),
        Case("synth", "--seed -1", [*synth, "--seed", "-1"]),
        Case(
            "synth", "repeat = 1000000000 on a call", ["synth", str(d / "deep.toml"), "--out", f"{o}.parquet"]
        ),
        Case("synth", "--truth the configuration", [*synth, "--truth", cfg]),
        Case(
            "infer nesting",
            "--smooth-bins 1e9",
            ["infer", "nesting", t, "--smooth-bins", "1e9", "--out", f"{o}.json"],
        ),
        Case(
            "infer nesting",
            "--tolerance 1e400s",
            ["infer", "nesting", t, "--tolerance", "1e400s", "--out", o],
        ),
        Case("infer nesting", "--out the trace", ["infer", "nesting", t, "--out", t]),
        Case(
            "infer nesting",
            "node names with terminal escapes, --show",
            [
                "infer",
                "nesting",
                str(d / "hostile.parquet"),
                "--no-calibrate",
                "--out",
                f"{o}-h.json",
                "--show",
                "3",
            ],
            "escaped",
        ),
        Case(
            "infer convolution",
            "--band 1e6s",
            ["infer", "convolution", t, "--quantum", "1ms", "--band", "1e6s", "--out", f"{o}.json"],
        ),
        Case(
            "infer convolution",
            "--quantum 1e400s",
            ["infer", "convolution", t, "--quantum", "1e400s", "--out", o],
        ),
        Case(
            "eval", "--instances of another trace", ["eval", p, str(d / "hostile.parquet"), "--instances", i]
        ),
        Case("viz draw", 'children: "x"', ["viz", "draw", str(d / "children-x.json"), "--out", f"{o}.svg"]),
        Case("viz draw", 'count: "many"', ["viz", "draw", str(d / "count-many.json"), "--out", f"{o}.svg"]),
        Case("viz draw", "NaN latency", ["viz", "draw", str(d / "nan-latency.json"), "--out", f"{o}.svg"]),
        Case(
            "viz draw",
            "a tree 20,001 levels deep",
            ["viz", "draw", str(d / "deep.json"), "--out", f"{o}.svg"],
        ),
        Case("viz draw", "cut JSON", ["viz", "draw", str(d / "not-json.json"), "--out", f"{o}.svg"]),
        Case(
            "viz draw",
            "node names with terminal escapes and markup",
            ["viz", "draw", f"{o}-h.json", "--out", f"{o}-h.svg"],
            "ok",
            lambda: _svg_is_xml(Path(f"{o}-h.svg")),
        ),
        Case("report", "--out the paths file", ["report", p, "--out", p]),
        Case("report", "a tree 20,001 levels deep", ["report", str(d / "deep.json"), "--out", f"{o}.html"]),
        Case("export", "--out the instances", ["export", i, "--format", "otlp", "--out", i]),
        Case(
            "export", "--max-traces -1", ["export", i, "--format", "otlp", "--max-traces", "-1", "--out", o]
        ),
        Case("demo", "--out an existing file", ["demo", "--out", str(d / "demo-file")]),
        Case(
            "trend import",
            "a value of 1e400",
            ["trend", "import", str(d / "results.csv"), "--store", f"{o}-s"],
        ),
        Case(
            "trend import", "time 1e20", ["trend", "import", str(d / "results-time.csv"), "--store", f"{o}-s"]
        ),
        Case(
            "trend import",
            "--store a file",
            ["trend", "import", str(d / "good.csv"), "--store", str(d / "store-file")],
        ),
        Case("trend check", "a missing store", ["trend", "check", "--store", str(d / "nope")]),
        Case(
            "trend from-paths",
            "--time 1e20",
            ["trend", "from-paths", p, "--store", f"{o}-s", "--build", "1", "--time", "1e20"],
        ),
    ]
    return c


def run_hostile(d: Path) -> list[Case]:
    _hostile_files(d)
    cases = hostile_cases(d)
    for case in cases:
        t0 = time.monotonic()
        done = subprocess.run(
            [*BIN, *case.argv], capture_output=True, cwd=d, timeout=300, stdin=subprocess.DEVNULL
        )
        out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
        lines = [line for line in err.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith(("error:", "wirepath"))]
        problems = []
        if "Traceback" in err:
            problems.append("traceback")
        if case.expect == "error":
            if done.returncode == 0:
                problems.append("exit 0")
            if len(errors) != 1:
                problems.append(f"{len(errors)} error lines")
        elif done.returncode != 0:
            problems.append(f"exit {done.returncode}")
        if case.expect == "escaped" and re.search("[\x1b\x07]", out + err):
            problems.append("raw control characters reached the terminal")
        if case.check is not None and not problems:
            extra = case.check()
            if extra:
                problems.append(extra)
        said = errors[-1] if errors else (lines or out.strip().splitlines() or [""])[-1]
        case.result = {
            "exit": done.returncode,
            "said": said.replace(f"{d}/", "").replace(str(d), "."),
            "held": not problems,
            "problems": problems,
            "s": time.monotonic() - t0,
        }
    return cases


# --- fuzzing, faults ---------------------------------------------------------------------


def run_fuzz(seconds: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "fuzz.py"), "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    rows = []
    for line in done.stdout.splitlines():
        m = re.match(r"^(\w+)\s+([\d,]+)\s+(\d+)\s+(\d+)$", line)
        if m:
            rows.append(
                {"target": m[1], "runs": int(m[2].replace(",", "")), "crashes": int(m[3]), "hangs": int(m[4])}
            )
    found = [line for line in done.stdout.splitlines() if "->" in line]
    corpus = sum(1 for p in (ROOT / "tests" / "fuzz_corpus").rglob("*") if p.is_file())
    return {"seconds": seconds, "rows": rows, "found": found, "corpus": corpus, "rc": done.returncode}


#: The test files the faults part runs, each whole.
FAULT_TESTS = (
    "tests/wirepath/test_faults.py",
    "tests/wirepath/test_outputs_respect_targets.py",
    "tests/tracefmt/test_outputs.py",
    "tests/capture/test_live_outputs.py",
    # Odd inputs (issue 39, items 10-23): endless and deeply nested configurations, symlink
    # loops, hand-edited paths files, deep call chains, pcapng options and snaplens out of
    # range, series the trend analysis cannot take, names shown escaped, late signals.
    "tests/wirepath/test_odd_inputs.py",
    "tests/capture/test_source_ranges.py",
    "tests/trend/test_one_bad_series.py",
    "tests/viz/test_names_shown_not_obeyed.py",
    "tests/wirepath/test_sigterm.py",
)


def run_faults(scratch: Path) -> dict[str, Any]:
    xml = scratch / "faults.xml"
    t0 = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *(str(ROOT / t) for t in FAULT_TESTS),
            f"--junitxml={xml}",
            f"--basetemp={scratch / 'faults'}",
        ],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    rows = []
    for tc in ET.parse(xml).getroot().iter("testcase"):
        verdict = "passed"
        message = ""
        for child in tc:
            if child.tag in ("failure", "error"):
                verdict, message = "FAILED", (child.get("message") or "").splitlines()[0][:120]
            elif child.tag == "skipped":
                verdict, message = "skipped", (child.get("message") or "")[:120]
        rows.append(
            {"test": tc.get("name"), "s": float(tc.get("time") or 0), "verdict": verdict, "msg": message}
        )
    return {"rows": rows, "wall_s": time.monotonic() - t0}


# --- load --------------------------------------------------------------------------------


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - b * mx, b


def run_load(
    scratch: Path, sizes_m: list[float], synth_m: list[float], pcap_sizes_k: list[int], cap_gb: float
) -> dict[str, Any]:
    res: dict[str, Any] = {"capture": [], "synth": [], "synth_refused": {}, "infer": []}
    # Captures of growing size, generated, then converted.
    for k in pcap_sizes_k:
        pcap, trace = scratch / f"c{k}.pcap", scratch / f"c{k}.parquet"
        gen = measure(
            [
                *BIN,
                "synth",
                str(CONFIG),
                "--messages",
                str(k * 1000),
                "--out",
                str(trace),
                "--pcap",
                str(pcap),
            ],
            cap_gb,
            scratch,
        )
        size = pcap.stat().st_size if pcap.exists() else 0
        conv = measure(
            [*BIN, "capture", "pcap", str(pcap), "--out", str(scratch / f"c{k}-out.parquet")], cap_gb, scratch
        )
        res["capture"].append({"messages": k * 1000, "pcap_bytes": size, "generate": gen, "convert": conv})
        for f in (pcap, trace, scratch / f"c{k}-out.parquet"):
            f.unlink(missing_ok=True)
    # synth: a size past its bound is refused at once; large ones stream.
    res["synth_refused"] = measure(
        [*BIN, "synth", str(CONFIG), "--messages", str(10**12), "--out", str(scratch / "huge.parquet")],
        cap_gb,
        scratch,
    )
    for m in synth_m:
        out = scratch / f"s{m:g}.parquet"
        argv = [*BIN, "synth", str(CONFIG), "--messages", str(int(m * 1e6)), "--parallelism", "10"]
        r = measure([*argv, "--out", str(out)], cap_gb, scratch)
        res["synth"].append(
            {"messages": int(m * 1e6), **r, "bytes": out.stat().st_size if out.exists() else 0}
        )
        if m not in sizes_m:
            out.unlink(missing_ok=True)
    # Inference at each size, with and without calibration.
    for calibrate in (False, True):
        for m in sizes_m:
            trace = scratch / f"s{m:g}.parquet"
            if not trace.exists():
                make = [*BIN, "synth", str(CONFIG), "--messages", str(int(m * 1e6)), "--parallelism", "10"]
                subprocess.run([*make, "--out", str(trace)], check=True, capture_output=True)
            argv = [*BIN, "infer", "nesting", str(trace), "--out", str(scratch / "p.json")]
            if not calibrate:
                argv.append("--no-calibrate")
            r = measure(argv, cap_gb, scratch)
            res["infer"].append({"messages": int(m * 1e6), "calibrate": calibrate, **r})
            if r["capped"] or r["rc"] != 0:
                break  # larger sizes would only be stopped later
    for m in sizes_m:
        (scratch / f"s{m:g}.parquet").unlink(missing_ok=True)
    return res


# --- the page ----------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("`", "'").replace("\n", " ")


def run_big_capture(scratch: Path, gb: float, cap_gb: float) -> dict[str, Any]:
    """A capture of about ``gb`` GB converted whole: pieces of 2,000,000 messages (about
    1.07 GB each, one ``synth --pcap`` run apiece, so no run renders more than one piece
    in memory), each starting a second after the one before ends, given to one ``capture
    pcap`` as the rotated files of one capture. The messages written are checked against
    the pieces' own traces (every call answered, nothing lost)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    piece_messages, start_ns = 2_000_000, 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z
    text = CONFIG.read_text()
    pcaps, messages, generate = [], 0, []
    while sum(f.stat().st_size for f in pcaps) < gb * 1e9:
        k = len(pcaps)
        start = _iso(start_ns)
        cfg = scratch / f"piece{k}.toml"
        cfg.write_text(text.replace("[trace]\n", f'[trace]\nstart = "{start}"\n', 1))
        trace, pcap = scratch / f"piece{k}.parquet", scratch / f"piece{k}.pcap"
        argv = [*BIN, "synth", str(cfg), "--seed", str(k + 1), "--messages", str(piece_messages)]
        generate.append(measure([*argv, "--out", str(trace), "--pcap", str(pcap)], cap_gb, scratch))
        ts = pq.read_table(trace, columns=["timestamp"])["timestamp"].cast("int64")
        messages += len(ts)
        start_ns = pc.max(ts).as_py() + 10**9
        trace.unlink()
        pcaps.append(pcap)
        print(f"  piece {k}: {pcap.stat().st_size / 1e9:.2f} GB", file=sys.stderr, flush=True)
    out = scratch / "big.parquet"
    argv = [*BIN, "capture", "pcap", *map(str, pcaps), "--out", str(out)]
    convert = measure(argv, cap_gb, scratch)
    load_average = os.getloadavg()[1]  # other work on the machine slows the wall time
    written = pq.read_metadata(out).num_rows if out.exists() else 0
    size = sum(f.stat().st_size for f in pcaps)
    for f in [*pcaps, out, *scratch.glob("piece*.toml"), *scratch.glob("piece*.names.toml")]:
        f.unlink(missing_ok=True)
    return {
        "pieces": len(pcaps),
        "pcap_bytes": size,
        "messages": messages,
        "written": written,
        "generate_rss_mb": max(g["rss_mb"] for g in generate),
        "generate_s": sum(g["wall_s"] for g in generate),
        "convert": convert,
        "load_average": load_average,
        "rss_cap_gb": cap_gb,
    }


def run_big_inference(scratch: Path, messages_m: float, cap_gb: float) -> dict[str, Any]:
    """``infer nesting`` with its default preset (calibration included) on one trace of
    ``messages_m`` million messages (the multitier workload at parallelism 10), measured
    whole; the paths file's request count is checked against the trace's."""
    import pyarrow.parquet as pq

    trace, paths = scratch / "t.parquet", scratch / "p.json"
    argv = [*BIN, "synth", str(CONFIG), "--messages", str(int(messages_m * 1e6)), "--parallelism", "10"]
    generate = measure([*argv, "--out", str(trace)], cap_gb, scratch)
    messages = pq.read_metadata(trace).num_rows if trace.exists() else 0
    infer = measure([*BIN, "infer", "nesting", str(trace), "--out", str(paths)], cap_gb, scratch)
    load_average = os.getloadavg()[1]
    doc = json.loads(paths.read_text()) if infer["rc"] == 0 and paths.exists() else {}
    for f in (trace, paths):
        f.unlink(missing_ok=True)
    return {
        "messages": messages,
        "generate": generate,
        "infer": infer,
        "patterns": len(doc.get("patterns", [])),
        "instances": sum(p.get("count", 0) for p in doc.get("patterns", [])),
        "load_average": load_average,
        "rss_cap_gb": cap_gb,
    }


def _iso(ns: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ns / 1e9, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _gb(mb: float) -> str:
    return f"{mb / 1024:.1f} GB"


def _provenance(parts: dict[str, Any]) -> str:
    """Which run each part's figures come from (a part skipped keeps its last figures)."""
    runs = parts.get("_runs", {})
    said = []
    for name in ("hostile", "fuzz", "faults", "load", "big", "biginfer"):
        if name in parts:
            r = runs.get(name)
            how = (
                f"`{' '.join(['python benchmarks/reliability.py', *r['argv']])}` on {r['when']}"
                if r
                else "an earlier run"
            )
            said.append(f"{name}: {how}")
    return "Each part's figures come from one run: " + "; ".join(said) + "."


def render(args: argparse.Namespace, parts: dict[str, Any]) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cmd = "python benchmarks/reliability.py " + " ".join(args.argv)
    doc = [
        "# Reliability: hostile input, faults and load",
        "",
        f"Written by `{cmd.strip()}` on {now} ({platform.node() and 'this machine'}: "
        f"{os.cpu_count()} cores, {_mem_gb():.0f} GB RAM, Python {platform.python_version()}). "
        + _provenance(parts)
        + " `make reliability` reruns every part.",
        "",
    ]
    if "hostile" in parts:
        cases = parts["hostile"]
        held = sum(c["held"] for c in cases)
        verbs = sorted({c["verb"] for c in cases})
        doc += [
            "## Hostile inputs, per verb",
            "",
            f"{len(cases)} invocations of {len(verbs)} verbs, each in its own process as a user runs it; "
            f"**{held} of {len(cases)} held**. *Held* means: for a bad input, a non-zero exit and "
            "exactly one "
            "`error:` line (no traceback); for hostile node names, exit 0 and no raw escape or bell "
            "character on the terminal (and well-formed SVG); for a damaged capture that still has whole "
            "records, exit 0 with the damage counted. The inputs are made by the script (a synthetic trace, "
            "its capture and paths file, then damaged copies).",
            "",
            "| verb | input | exit | what it said | held |",
            "|---|---|---:|---|---|",
        ]
        for c in cases:
            said = _md(c["said"])[:150]
            verdict = "yes" if c["held"] else "**no**: " + ", ".join(c["problems"])
            doc.append(f"| {c['verb']} | {_md(c['what'])} | {c['exit']} | {said} | {verdict} |")
        doc.append("")
    if "fuzz" in parts:
        f = parts["fuzz"]
        runs = sum(r["runs"] for r in f["rows"])
        crashes = sum(r["crashes"] for r in f["rows"])
        hangs = sum(r["hangs"] for r in f["rows"])
        doc += [
            "## Fuzzing",
            "",
            f"`benchmarks/fuzz.py --seconds {f['seconds']:g}` (mutated captures, text traces and "
            "paths files, "
            "random bytes into every protocol parser; a run passes when it returns or raises a "
            "wirepath error): "
            f"**{runs:,} executions, {crashes} crashes, {hangs} hangs**. The regression corpus "
            "(`tests/fuzz_corpus/`, replayed by `tests/wirepath/test_fuzz_corpus.py`) holds "
            f"{f['corpus']} inputs.",
            "",
            "| target | executions | crashes | hangs |",
            "|---|---:|---:|---:|",
        ]
        doc += [f"| {r['target']} | {r['runs']:,} | {r['crashes']} | {r['hangs']} |" for r in f["rows"]]
        doc += [""] + [f"- new: `{_md(line)}`" for line in f["found"][:20]] + [""]
    if "faults" in parts:
        rows = parts["faults"]["rows"]
        ok = sum(r["verdict"] == "passed" for r in rows)
        doc += [
            "## Faults survived",
            "",
            f"{', '.join(f'`{t}`' for t in FAULT_TESTS)}, each run whole "
            f"({parts['faults']['wall_s']:.0f} s): **{ok} of "
            f"{len(rows)} passed**. A full disk is a 4 MiB tmpfs filled to the last byte (or to 64 "
            "KiB, so the "
            "output runs out of room midway); the previous output is a file already at the output's name. "
            "SIGTERM in process arrives as the output, written whole, is about to replace the previous one. "
            "SIGKILL leaves the writer's own temporary `.NAME.XXXXXXXX.partial` file (nothing can remove "
            "it) and the previous output byte for byte; the next writer of that output (or of any result "
            "in a store) removes the stale file, which no living writer holds a lock on. "
            "Odd inputs: configuration-sized inputs (TOML and JSON configurations, names files, "
            "results and paths files) are read to a size limit and refused nested past 100 levels, "
            "one line each; a paths file is checked whole on reading (every field a reader takes, "
            "every number bounded); call trees are walked with stacks of their own; pcapng interfaces "
            "and ticks that give no timestamp are counted as damage; names are shown escaped. "
            "Timestamps: INT64_MIN (numpy's and pandas' NaT) is refused; spans of the whole int64 "
            "range are computed without wrapping, and nesting refuses one over 292 years in one line.",
            "",
            "| test | case | s | result |",
            "|---|---|---:|---|",
        ]
        for r in rows:
            name, _, case = r["test"].partition("[")
            verdict = r["verdict"] + (f": {_md(r['msg'])}" if r["msg"] and r["verdict"] != "passed" else "")
            doc.append(f"| `{name}` | {_md(case.rstrip(']'))} | {r['s']:.1f} | {verdict} |")
        doc.append("")
    if "load" in parts:
        doc += _render_load(parts["load"], args, parts.get("big"), parts.get("biginfer"))
    doc += _security_notes()
    return "\n".join(doc) + "\n"


def _render_load(
    load: dict[str, Any],
    args: argparse.Namespace,
    big: dict[str, Any] | None = None,
    big_infer: dict[str, Any] | None = None,
) -> list[str]:
    doc = [
        "## Load held",
        "",
        f"Each process measured whole (start-up included): wall time and peak RSS (VmHWM), stopped past "
        f"{args.rss_cap_gb:g} GB (the machine is shared).",
        "",
        "### A large capture, converted (`wirepath capture pcap`)",
        "",
        "Captures rendered by `wirepath synth --messages N --pcap` (the multitier workload, one TCP "
        "connection per call: 4.5 packets per message).",
        "",
        "| messages | capture | generate (s) | generate RSS | convert (s) | convert RSS | MB/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    caps = load["capture"]
    for c in caps:
        g, v = c["generate"], c["convert"]
        rate = c["pcap_bytes"] / 1e6 / v["wall_s"] if v["wall_s"] else 0
        doc.append(
            f"| {c['messages']:,} | {c['pcap_bytes'] / 1e6:,.0f} MB | {g['wall_s']:.1f} | "
            f"{g['rss_mb']:,.0f} MB | "
            f"{v['wall_s']:.1f} | {v['rss_mb']:,.0f} MB | {rate:.0f} |"
        )
    if len(caps) >= 2:
        xs = [c["pcap_bytes"] / 1e9 for c in caps]
        a, b = _fit(xs, [c["convert"]["rss_mb"] for c in caps])
        ta, tb = _fit(xs, [c["convert"]["wall_s"] for c in caps])
        ga, gb = _fit(xs, [c["generate"]["rss_mb"] for c in caps])
        doc += [
            "",
            f"Converting: peak RSS {a:,.0f} MB + {b:,.0f} MB per GB of capture; at 10 GB that is "
            f"**{(a + 10 * b) / 1024:.1f} GB** and {(ta + 10 * tb) / 60:.1f} minutes (a straight line "
            f"through {len(caps)} sizes, largest {max(xs):.2f} GB; "
            + ("the measured 10 GB run is below). " if big else "10 GB itself was not converted here). ")
            + (
                "Memory is nearly flat in the capture size: the reader streams."
                if b < 100
                else "**Memory grows with the capture** until a minute of it is read: closed "
                "connections are kept for the idle timeout (60 s of capture time) for their late "
                "retransmissions, and a generated capture packs a great many connections into a minute."
            ),
            "Generating the capture (`synth --pcap`, which renders the whole trace in memory): "
            f"{ga:,.0f} MB + "
            f"{gb:,.0f} MB per GB of capture, so a 10 GB capture needs about "
            f"{(ga + 10 * gb) / 1024:.1f} GB to "
            "make: more than this machine has, so a 10 GB capture cannot be made in one `synth --pcap` "
            "run here.",
        ]
    doc += _render_big(big)
    r = load["synth_refused"]
    doc += [
        "",
        "### `synth` at any size",
        "",
        f"`synth --messages 1000000000000` is refused before anything is written: exit {r['rc']}, "
        f"{r['wall_s']:.1f} s, {r['rss_mb']:,.0f} MB (`{_md(r['err'])}`). Sizes within its bound are "
        "written row group by row group:",
        "",
        "| messages | time (s) | peak RSS | trace on disk |",
        "|---:|---:|---:|---:|",
    ]
    for s in load["synth"]:
        doc.append(
            f"| {s['messages']:,} | {s['wall_s']:.1f} | {s['rss_mb']:,.0f} MB | {s['bytes'] / 1e6:,.0f} MB |"
        )
    if len(load["synth"]) >= 2:
        (m1, r1), (m2, r2) = ((s["messages"] / 1e6, s["rss_mb"]) for s in load["synth"][-2:])
        b = (r2 - r1) / (m2 - m1)
        grew = f"Between the two largest sizes peak RSS grew {b:,.1f} MB per million messages: "
        if m2 >= 1000:  # the bound itself was run
            tail = ("flat (synth streams)" if b < 2 else "**it still grows with the size**") + (
                f"; at its bound of 1,000,000,000 messages it peaked at {r2:,.0f} MB."
            )
        else:
            tail = "nearly flat (synth streams), but " if b < 2 else "**it still grows with the size**; "
            need = _gb(r2 + (1000 - m2) * b)
            tail += f"at that rate its bound of 1,000,000,000 messages would need about {need} (not run)."
        doc += ["", grew + tail]
    doc += [
        "",
        "### Inference (`wirepath infer nesting`)",
        "",
        "The multitier workload at parallelism 10; the default preset, with its calibration twin and "
        "without (`--no-calibrate`).",
        "",
        "| messages | calibration | time (s) | peak RSS | exit |",
        "|---:|---|---:|---:|---|",
    ]
    for r in load["infer"]:
        ended = "stopped at the RSS cap" if r["capped"] else str(r["rc"])
        doc.append(
            f"| {r['messages']:,} | {'yes' if r['calibrate'] else 'no'} | {r['wall_s']:.1f} | "
            f"{r['rss_mb']:,.0f} MB | {ended} |"
        )
    doc.append("")
    for calibrate in (False, True):
        pts = [r for r in load["infer"] if r["calibrate"] == calibrate and r["rc"] == 0]
        if len(pts) < 2:
            continue
        xs = [r["messages"] / 1e6 for r in pts]
        a, b = _fit(xs, [r["rss_mb"] for r in pts])
        ta, tb = _fit(xs, [r["wall_s"] for r in pts])
        at50, t50 = a + 50 * b, ta + 50 * tb
        label = "with calibration" if calibrate else "`--no-calibrate`"
        if big_infer:
            verdict = f"the measured run of {big_infer['messages']:,} messages is below."
        elif at50 > 24 * 1024:
            verdict = "**it does not fit this 24 GB machine**."
        elif at50 > 24 * 1024 * 0.7:
            verdict = (
                "within 24 GB on paper, with little room to spare; **not run at 50 M here**, so whether it "
                "fits is an extrapolation, not a measurement."
            )
        else:
            verdict = "it fits 24 GB by this line (not run at 50 M here)."
        doc.append(
            f"- {label}: {b:,.0f} MB and {tb:.1f} s per million messages; 50,000,000 messages would take "
            f"about **{_gb(at50)}** and {t50 / 60:.0f} minutes (straight line through {len(pts)} sizes, "
            f"largest {max(xs):g} M): {verdict}"
        )
    doc += [
        "",
        "Inference reads the whole trace and builds its call pairs in memory (not streamed or windowed), "
        "so its memory grows linearly with the trace; the per-message cost above is what decides the "
        "largest trace a machine can take.",
    ]
    doc += _render_big_inference(big_infer)
    doc.append("")
    return doc


def _security_notes() -> list[str]:
    pats = {
        "pickle": r"\bpickle\b|\bmarshal\.loads|\bshelve\b",
        "eval/exec": r"(?<![\w.])(eval|exec)\(",
        "shell=True / os.system / os.popen": r"shell\s*=\s*True|os\.system\(|os\.popen\(",
        "yaml.load / numpy allow_pickle": r"yaml\.load\(|allow_pickle\s*=\s*True",
    }
    code = [
        p
        for d in ("capture", "tracefmt", "infer", "synth", "viz", "trend", "wirepath")
        for p in (ROOT / d).rglob("*.py")
    ]
    rows = []
    for what, pat in pats.items():
        hits = []
        for p in code:
            for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(pat, line) and not line.lstrip().startswith("#"):
                    hits.append(f"{p.relative_to(ROOT)}:{n}")
        rows.append((what, hits))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    columns, mode = _measured_outputs()
    setcap = "setcap cap_net_raw,cap_net_admin=eip" in readme
    doc = [
        "## Security notes",
        "",
        f"Searched the {len(code)} Python files of the packages (capture, tracefmt, infer, synth, "
        "viz, trend, "
        "wirepath) for what could run packet contents as code:",
        "",
        "| construct | where |",
        "|---|---|",
    ]
    for what, hits in rows:
        doc.append(f"| {what} | {', '.join(f'`{h}`' for h in hits[:8]) if hits else 'none'} |")
    doc += [
        "",
        "- Subprocesses (`dot`, `tcpdump`) are started with argument lists, never through a shell; packet "
        "contents reach them only as data (DOT text on stdin, escaped by `viz.dot`).",
        "- Names from packets (HTTP Host, DNS names, keys) reach the terminal through `tracefmt.printable` "
        "and SVG/HTML through the escaping of `viz` (the hostile-name rows above).",
        f"- Payloads are not stored unless asked: `capture pcap samples/testbed/web.pcap` wrote the columns "
        f"{', '.join(columns)} (no `x_payload`; `--keep-payload` adds it). `label` keeps the request line's "
        "method and path (e.g. `GET /cart`), `bytes` only a length.",
        f"- Outputs are created without world-write: `convert` run under umask 000 made a file of mode "
        f"{mode} (`tracefmt.OutputFile` creates files 0644 and directories 0755 whatever the umask).",
        f"- The live agent needs privilege only to open the interface: the README documents the setcap "
        "route (`setcap cap_net_raw,cap_net_admin=eip` on tcpdump): "
        f"{'present' if setcap else '**missing**'}.",
        "",
    ]
    return doc


def _measured_outputs() -> tuple[list[str], str]:
    """The columns ``capture pcap`` writes for a sample capture, and the mode of a file
    ``convert`` publishes under umask 000."""
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "web.parquet"
        subprocess.run(
            [*BIN, "capture", "pcap", str(SAMPLE_PCAP), "--out", str(out)], check=True, capture_output=True
        )
        columns = [f"`{c}`" for c in pq.read_schema(out).names]
        text = Path(d) / "web.txt"
        subprocess.run(
            [*BIN, "convert", str(out), str(text)], check=True, capture_output=True, preexec_fn=_umask0
        )
        return columns, oct(text.stat().st_mode & 0o777)


def _umask0() -> None:
    os.umask(0)


def _mem_gb() -> float:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) / 1024 / 1024


def _render_big_inference(big: dict[str, Any] | None) -> list[str]:
    if not big:
        return []
    v = big["infer"]
    ended = "stopped at the RSS cap" if v["capped"] else f"exit {v['rc']}"
    return [
        "",
        f"### {big['messages']:,} messages inferred",
        "",
        f"One trace of {big['messages']:,} messages (`synth --parallelism 10`: "
        f"{big['generate']['wall_s']:.0f} s, peak RSS {big['generate']['rss_mb']:,.0f} MB), given to "
        f"`wirepath infer nesting` with its default preset, calibration included: "
        f"**{v['wall_s'] / 60:.1f} minutes, peak RSS {_gb(v['rss_mb'])}**, {ended} (load average "
        f"{big.get('load_average', float('nan')):.1f} on {os.cpu_count()} cores as it ended; processes "
        f"stopped past {big.get('rss_cap_gb', 6):g} GB); {big['patterns']:,} patterns covering "
        f"{big['instances']:,} requests in its paths file.",
    ]


def _render_big(big: dict[str, Any] | None) -> list[str]:
    if not big:
        return []
    v = big["convert"]
    return [
        "",
        f"### {big['pcap_bytes'] / 1e9:.1f} GB converted whole",
        "",
        f"{big['pieces']} captures of 2,000,000 messages each, one after another in time (each made by "
        f"its own `synth --pcap` run: {big['generate_s'] / 60:.1f} minutes in all, at most "
        f"{big['generate_rss_mb']:,.0f} MB), given to one `wirepath capture pcap` as the rotated files "
        f"of one capture: **{v['wall_s'] / 60:.1f} minutes, peak RSS {v['rss_mb']:,.0f} MB**, exit "
        f"{v['rc']}, {big['pcap_bytes'] / 1e6 / v['wall_s']:.0f} MB/s (load average "
        f"{big.get('load_average', float('nan')):.1f} on {os.cpu_count()} cores as it ended; processes "
        f"stopped past {big.get('rss_cap_gb', 6):g} GB); {big['written']:,} messages "
        f"written of the {big['messages']:,} the pieces hold"
        + (" (every one)." if big["written"] == big["messages"] else " (**not every one**)."),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fuzz-seconds", type=float, default=120.0)
    ap.add_argument("--sizes", default="1,2,5", help="inference sizes, million messages (default 1,2,5)")
    ap.add_argument("--synth-sizes", default="1,5,20,50", help="synth sizes, million messages (1,5,20,50)")
    ap.add_argument(
        "--pcap-sizes", default="200,1000,2000", help="captures, thousand messages (200,1000,2000)"
    )
    ap.add_argument("--rss-cap-gb", type=float, default=6.0)
    ap.add_argument(
        "--big-capture-gb", type=float, default=10.0, help="the capture converted whole, GB (default 10)"
    )
    ap.add_argument(
        "--big-infer-m",
        type=float,
        default=50.0,
        help="the trace inferred whole, million messages (default 50)",
    )
    ap.add_argument(
        "--skip",
        default="",
        help="parts to skip: hostile,fuzz,faults,load,big,biginfer (their last figures are kept)",
    )
    ap.add_argument("--out", default=str(ROOT / "docs" / "reliability.md"))
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument(
        "--figures", default=str(ROOT / "build" / "reliability.json"), help="where the figures go"
    )
    ap.add_argument("--from-figures", action="store_true", help="only write the page from --figures")
    args = ap.parse_args(argv)
    args.argv = sys.argv[1:] if argv is None else argv
    skip = {s for s in args.skip.split(",") if s}
    if args.from_figures:
        skip = {"hostile", "fuzz", "faults", "load", "big", "biginfer"}
    (ROOT / "build").mkdir(exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="reliability-", dir=ROOT / "build"))
    figures = Path(args.figures)
    parts: dict[str, Any] = json.loads(figures.read_text()) if skip and figures.exists() else {}
    try:
        for name, work in (
            ("hostile", lambda: _hostile_part(scratch)),
            ("fuzz", lambda: run_fuzz(args.fuzz_seconds)),
            ("faults", lambda: run_faults(scratch)),
            ("load", lambda: _load_part(scratch, args)),
            ("big", lambda: _big_part(scratch, args)),
            ("biginfer", lambda: _big_infer_part(scratch, args)),
        ):
            if name in skip:
                continue
            print(f"{name} ...", file=sys.stderr)
            parts[name] = work()
            when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            parts.setdefault("_runs", {})[name] = {"when": when, "argv": args.argv}
            figures.write_text(json.dumps(parts, indent=1))  # kept should a later part fail
        Path(args.out).write_text(render(args, parts), encoding="utf-8")
        print(f"wrote {args.out} (figures: {figures})", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


def _hostile_part(scratch: Path) -> list[dict[str, Any]]:
    (scratch / "hostile").mkdir()
    return [{"verb": c.verb, "what": c.what, **c.result} for c in run_hostile(scratch / "hostile")]


def _load_part(scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    (scratch / "load").mkdir()
    sizes = [float(s) for s in args.sizes.split(",")]
    pcaps = [int(s) for s in args.pcap_sizes.split(",")]
    synths = [float(s) for s in args.synth_sizes.split(",")]
    return run_load(scratch / "load", sizes, synths, pcaps, args.rss_cap_gb)


def _big_part(scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    (scratch / "big").mkdir()
    return run_big_capture(scratch / "big", args.big_capture_gb, args.rss_cap_gb)


def _big_infer_part(scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    (scratch / "biginfer").mkdir()
    return run_big_inference(scratch / "biginfer", args.big_infer_m, args.rss_cap_gb)


if __name__ == "__main__":
    sys.exit(main())
