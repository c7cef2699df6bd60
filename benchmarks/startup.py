"""Command-line start: CPU time of short ``wirepath`` commands, where start-up is most of
the work, against another copy of the tree in the same run.

Each command runs as its own process, alternately with the other tree, ``--repeat``
times; the median CPU time (user + system) of each is printed as a Markdown table. The
other tree's command line is run as its console command ran it (``main()``).

    .venv/bin/python benchmarks/startup.py --before /path/to/older/tree
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIREPATH = str(Path(sys.executable).parent / "wirepath")


def cpu_seconds(argv: list[str]) -> float:
    """User + system CPU time of one process running ``argv``."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def commands(work: Path) -> dict[str, list[str]]:
    trace = work / "sw1.parquet"
    subprocess.run(
        [WIREPATH, "convert", str(ROOT / "samples" / "sw1.txt"), str(trace)], check=True, capture_output=True
    )
    pcap = ROOT / "samples" / "testbed" / "bridge.pcap"
    return {
        "--version": ["--version"],
        "info (480 messages)": ["info", str(trace)],
        "capture pcap (814 packets)": [
            "capture",
            "pcap",
            str(pcap),
            "--out",
            str(work / "b.parquet"),
            "--quiet",
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="a copy of the project tree to compare with")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    before = [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(args.before)!r}); "
              "from wirepath.cli import main; sys.exit(main())"]  # fmt: skip
    print("| `wirepath ...` | CPU s, before | CPU s, now |")
    print("|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in commands(Path(tmp)).items():
            then, now = [], []
            for _ in range(args.repeat):
                then.append(cpu_seconds([*before, *argv]))
                now.append(cpu_seconds([WIREPATH, *argv]))
            command, _, note = name.partition(" (")
            label = f"`{command}`" + (f" ({note}" if note else "")
            print(f"| {label} | {statistics.median(then):.2f} | {statistics.median(now):.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
