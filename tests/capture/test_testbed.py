"""The namespace testbed driven briefly with the live agent on its switch (root only), and
the captures recorded from it in samples/testbed/."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

import tracefmt
from capture import convert_pcaps

ROOT = Path(__file__).resolve().parents[2]
TESTBED = ROOT / "samples" / "testbed"


def _load_testbed() -> ModuleType:
    spec = importlib.util.spec_from_file_location("wirepath_testbed", TESTBED / "testbed.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _edges(trace_path: Path | str) -> Counter:
    """(sender, receiver, op) -> messages, with the testbed's names."""
    names = tracefmt.load_names(TESTBED / "names.toml")
    t = tracefmt.rename_nodes(tracefmt.read_trace(trace_path), names)
    cols = [t[c].to_pylist() for c in ("sender", "receiver", "op")]
    return Counter(zip(*cols, strict=True))


def _expected(requests: int) -> Counter:
    """What the tiers send for ``requests`` client requests (every third is a cart)."""
    carts = len(range(0, requests, 3))
    calls = {
        ("client", "web"): requests,
        ("web", "app"): requests + carts,
        ("app", "db"): requests + 2 * carts,
    }
    want: Counter = Counter()
    for (a, b), n in calls.items():
        want[(a, b, "call")] = n
        want[(b, a, "return")] = n
    return want


@pytest.mark.needs_root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, packet capture)")
def test_live_agent_on_the_bridge_sees_every_tier(tmp_path: Path) -> None:
    testbed = _load_testbed()
    requests = 45
    probe = f"wptb-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0 and "not permitted" in made.stderr.lower():
        pytest.skip(f"root, but this container may not make network namespaces: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], check=False)
    with testbed.Testbed() as bed:
        cmd = bed.exec_argv("sw", sys.executable, "-m", "wirepath", "capture", "live", "--iface", "br0")
        cmd += ["--names", str(TESTBED / "names.toml"), "--out", str(tmp_path / "cap"), "--json"]
        agent = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = threading.Event()
        err: list[str] = []

        def read() -> None:
            assert agent.stderr is not None
            for line in agent.stderr:
                err.append(line)
                if line.startswith("recording "):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        try:
            assert ready.wait(60), err
            bed.load(requests, concurrency=1)
        finally:
            agent.send_signal(signal.SIGINT)
            out, _ = agent.communicate(timeout=120)
        namespaces = list(bed.namespaces)
    assert agent.returncode == 0, err
    doc = json.loads(out)
    assert doc["packets"]["dropped_kernel"] == 0
    # The switch saw every tier's calls and returns, and nothing else.
    assert _edges(doc["trace"]) == _expected(requests)
    trace = tracefmt.read_trace(doc["trace"])
    cols = [trace[c].to_pylist() for c in ("receiver", "op", "proto")]
    protos = Counter(zip(*cols, strict=True))
    # The db tier speaks the Redis protocol, the others HTTP.
    assert protos[("db", "call", "redis")] == _expected(requests)[("app", "db", "call")]
    assert protos[("web", "call", "http")] == requests
    assert protos[("app", "call", "http")] == _expected(requests)[("web", "app", "call")]
    # Teardown removed every namespace.
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not any(ns in listed for ns in namespaces)


def test_recorded_bridge_capture_holds_every_tier(tmp_path: Path) -> None:
    """samples/testbed/bridge.pcap (60 requests, recorded by testbed.py record) decodes in full."""
    report = convert_pcaps([TESTBED / "bridge.pcap"], tmp_path / "b.parquet")
    assert report.messages == 480
    assert _edges(tmp_path / "b.parquet") == _expected(60)
    # The live agent's own trace of it, kept beside it, says the same.
    assert _edges(TESTBED / "trace.parquet") == _expected(60)


def test_recorded_host_captures_merge_into_the_same_messages(tmp_path: Path) -> None:
    """The per-host captures, merged as capture points, give the bridge's messages again."""
    files = [TESTBED / f"{h}.pcap" for h in ("web", "app", "db")]
    convert_pcaps(files, tmp_path / "h.parquet", point_from_file=True)
    assert _edges(tmp_path / "h.parquet") == _expected(60)


def test_testbed_refuses_to_run_without_root() -> None:
    if os.geteuid() == 0:
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    else:
        cmd = []
    run = subprocess.run(
        [*cmd, sys.executable, str(TESTBED / "testbed.py"), "run"], capture_output=True, text=True, timeout=60
    )
    assert run.returncode != 0
    assert "the testbed needs root" in run.stderr
