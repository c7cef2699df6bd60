"""The real testbed (samples/testbed/real): nginx, two app servers of ours, Redis,
PostgreSQL and a gRPC service in network namespaces, captured on the switch and on every
host, with three faults injected one run each. Root only; skipped when a server program
or a Python package of the testbed is missing.

One base run and three fault runs (300 requests each from 16 keep-alive clients, about
a minute and a half in all) are shared by the tests below. Their own target, `make
testbed-check`, keeps `make test` under ten minutes.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "samples" / "testbed" / "real"
REQUESTS = 300
CLIENTS = 16
THINK_S = 0.32
SKEW_MS = 40.0

pytestmark = [pytest.mark.slow, pytest.mark.needs_root, pytest.mark.testbed]


def _realbed() -> ModuleType:
    if str(REAL) not in sys.path:
        sys.path.insert(0, str(REAL))
    return importlib.import_module("realbed")


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, packet capture, servers)")
    rb = _realbed()
    missing = rb.missing_binaries()
    if missing:
        pytest.skip("the real testbed needs: " + ", ".join(missing))
    probe = f"wprt-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"root, but no network namespaces here: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], check=False)
    out = tmp_path_factory.mktemp("realbed")
    truth = importlib.import_module("truth")
    # The relay delays PostgreSQL's replies the same on every kernel (tc netem needs
    # sch_netem, which some kernels lack); `make testbed` uses netem where there is one.
    with rb.open_testbed(out / "work", delay_by="relay") as bed:
        namespaces = list(bed.namespaces)
        doc = rb.run_all(bed, out, REQUESTS, CLIENTS, SKEW_MS, think_s=THINK_S)
        base = out / "base"
    doc["truth"] = truth.score(base / "bridge" / "trace.parquet", base / "spans.jsonl", base)
    doc["namespaces"] = namespaces
    return doc


@pytest.mark.parametrize("fault", ["pgdelay", "code", "slowgrpc"])
def test_the_diff_names_each_injected_fault(findings: dict[str, Any], fault: str) -> None:
    """With the default inference, the diff's pattern whose requests slowed most is the
    faulty endpoint's on the faulty server, its visit that slowed most is the faulty
    callee (time inside it, or spent before calling it), and the change is the injected
    one within 20%."""
    f = findings["faults"][fault]
    assert f["found"], f["text"]


def test_top_patterns_are_the_endpoints_call_sequences(findings: dict[str, Any]) -> None:
    """The six most frequent patterns of the base run are the README's: three endpoints on
    two app servers, the fan-out's three calls as one concurrent group."""
    pc = findings["runs"]["base"]["patterns"]
    assert pc["top_are_expected"], pc["top"]
    assert pc["share"] >= 0.8, pc


def test_host_captures_merge_into_the_bridge_messages(findings: dict[str, Any]) -> None:
    """Every run: the six hosts' tcpdump files, one of them 40 ms off, merged as capture
    points with estimated offsets, hold the messages the switch saw; the offset found for
    the skewed host undoes its error within a millisecond."""
    for name, run in findings["runs"].items():
        assert run["hosts"]["differ"] == {}, (name, run["hosts"])
        assert run["hosts"]["messages"][0] == run["hosts"]["messages"][1] > 0
        offsets = {p["point"]: p["offset_ns"] for p in run["offsets"]}
        assert abs(offsets["app2"] + SKEW_MS * 1e6) < 1e6, offsets
        assert all(abs(v) < 1e6 for k, v in offsets.items() if k != "app2"), offsets


def test_requests_scored_against_the_apps_spans(findings: dict[str, Any]) -> None:
    """The apps' OpenTelemetry spans, joined to the switch's messages, give per-request
    truth: nearly every call is joined, and most requests are inferred fully right."""
    join, ev = findings["truth"]["join"], findings["truth"]["eval"]
    assert join["requests"] == REQUESTS
    assert join["joined_share"] >= 0.99, join
    assert ev["instances"]["fully_right_rate"] >= 0.8, ev["instances"]


def test_teardown_leaves_no_namespace(findings: dict[str, Any]) -> None:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert findings["namespaces"]
    assert not any(ns in listed for ns in findings["namespaces"])


def test_run_refuses_a_non_empty_directory_it_did_not_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out`` is wiped before a run, as root: only an earlier run's directory may be."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    rb = _realbed()
    keep = tmp_path / "mine.txt"
    keep.write_text("not a testbed run")
    assert rb.main(["run", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"error: {tmp_path} is not empty and holds no earlier testbed run; give a new directory"
    assert keep.read_text() == "not a testbed run"
