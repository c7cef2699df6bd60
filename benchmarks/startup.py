"""Command lines against another copy of the tree, in the same run: CPU time (user +
system) and peak RSS of each ``wirepath`` command as its own process.

Short commands, where start-up is most of the work, always; with ``--pcap FILE``
(repeatable) also ``capture pcap FILE`` whole. Each command runs alternately with the
other tree's, ``--repeat`` times; the medians are printed as a Markdown table. The other
tree's command line is run as its console command runs it.

    .venv/bin/python benchmarks/startup.py --before /path/to/older/tree [--pcap big.pcap]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from ingest import compile_packages  # benchmarks/ is this script's first path entry

ROOT = Path(__file__).resolve().parents[1]
WIREPATH = str(Path(sys.executable).parent / "wirepath")


def measure(argv: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS (MB) of one process running ``argv``."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {proc.returncode}")
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def commands(work: Path, pcaps: list[Path]) -> dict[str, list[str]]:
    trace = work / "sw1.parquet"
    subprocess.run(
        [WIREPATH, "convert", str(ROOT / "samples" / "sw1.txt"), str(trace)], check=True, capture_output=True
    )
    sample = ROOT / "samples" / "testbed" / "bridge.pcap"
    out = {
        "--version": ["--version"],
        "info (480 messages)": ["info", str(trace)],
        "capture pcap (814 packets)": [
            "capture",
            "pcap",
            str(sample),
            "--out",
            str(work / "b.parquet"),
            "--quiet",
        ],
        "--help": ["--help"],
        "infer nesting, the defaults (480 messages)": [
            "infer",
            "nesting",
            str(trace),
            "--out",
            str(work / "d.json"),
        ],
        "infer nesting --preset paper (480 messages)": [
            "infer",
            "nesting",
            str(trace),
            "--preset",
            "paper",
            "--out",
            str(work / "p.json"),
        ],
    }
    for pcap in pcaps:
        mb = pcap.stat().st_size / 1e6
        out[f"capture pcap ({pcap.name}, {mb:,.0f} MB)"] = [
            "capture",
            "pcap",
            str(pcap),
            "--out",
            str(work / "t.parquet"),
            "--quiet",
        ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="a copy of the project tree to compare with")
    ap.add_argument("--pcap", type=Path, action="append", default=[], help="also convert this capture")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    for tree in (ROOT, args.before):
        compile_packages(tree)  # as installed: no module compiled again per process
    # The older tree's console command: ``run()`` where it has one, else ``main()``.
    code = "from wirepath import cli; sys.exit(cli.run() if hasattr(cli, 'run') else cli.main())"
    before = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(args.before)!r}); {code}"]
    print("| `wirepath ...` | CPU s, before | CPU s, now | peak RSS, before | peak RSS, now |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in commands(Path(tmp), args.pcap).items():
            then, now = [], []
            for _ in range(args.repeat):
                then.append(measure([*before, *argv]))
                now.append(measure([WIREPATH, *argv]))
            command, _, note = name.partition(" (")
            label = f"`{command}`" + (f" ({note}" if note else "")
            cpu = [statistics.median(c for c, _ in runs) for runs in (then, now)]
            rss = [statistics.median(r for _, r in runs) for runs in (then, now)]
            print(
                f"| {label} | {cpu[0]:.2f} | {cpu[1]:.2f} | {rss[0]:,.0f} MB | {rss[1]:,.0f} MB |", flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
