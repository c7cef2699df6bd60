"""Record tshark's HTTP and DNS call/return counts for ../shared/data/pcaps (run once).

Commands per file (the numbers in data/tshark_counts.json come from exactly these):
  tshark -r FILE -Y http.request -T fields -e http.request.method
  tshark -r FILE -Y http.response -T fields -e http.response.code
  tshark -r FILE -Y dns.flags.response==0 -T fields -e dns.id
  tshark -r FILE -Y dns.flags.response==1 -T fields -e dns.id
Each value is one PDU (several PDUs in one frame are comma-separated).

    .venv/bin/python tests/capture/record_tshark.py ../shared/data/pcaps \
        > tests/capture/data/tshark_counts.json
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

QUERIES = {
    "http": (("http.request", "http.request.method"), ("http.response", "http.response.code")),
    "dns": (("dns.flags.response==0", "dns.id"), ("dns.flags.response==1", "dns.id")),
}


def _pdus(path: Path, display_filter: str, field: str) -> int:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", display_filter, "-T", "fields", "-e", field],
        capture_output=True,
        text=True,
    ).stdout
    return sum(len(line.split(",")) for line in out.splitlines() if line.strip())


def counts(path: Path) -> dict[str, list[int]]:
    """{"http": [requests, responses], "dns": [queries, responses]} as tshark sees them."""
    return {p: [_pdus(path, *q[0]), _pdus(path, *q[1])] for p, q in QUERIES.items()}


def main(root: str) -> None:
    base = Path(root)
    files = sorted(p for p in base.glob("*/*") if p.suffix not in (".result", ".txt"))
    doc = {
        "command": "tshark -r FILE -Y FILTER -T fields -e FIELD, for (FILTER, FIELD) in "
        + "; ".join(f"({f}, {e})" for qs in QUERIES.values() for f, e in qs),
        "tshark": subprocess.run(["tshark", "--version"], capture_output=True, text=True).stdout.splitlines()[
            0
        ],
        "counts": {f"{p.parent.name}/{p.name}": counts(p) for p in files},
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=True)
    print()


if __name__ == "__main__":
    main(sys.argv[1])
