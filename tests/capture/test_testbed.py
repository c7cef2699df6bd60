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
from typing import Any

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


class _Agent:
    """``wirepath capture live`` on an interface of one of the testbed's namespaces."""

    def __init__(self, bed: Any, host: str, iface: str, out: Path, *extra: str) -> None:
        cmd = bed.exec_argv(host, sys.executable, "-m", "wirepath", "capture", "live", "--iface", iface)
        cmd += ["--names", str(TESTBED / "names.toml"), "--out", str(out), "--json", *extra]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.err.append(line)
            if line.startswith("recording "):
                self.ready.set()
        self.ready.set()

    def stop(self) -> dict[str, Any]:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.stdout is not None
        out = self.proc.stdout.read()  # the reader thread owns stderr
        self.proc.stdout.close()
        self.proc.wait(120)
        self.reader.join(5)
        assert self.proc.stderr is not None
        self.proc.stderr.close()
        assert self.proc.returncode == 0, self.err
        return json.loads(out)


@pytest.mark.needs_root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (network namespaces, packet capture)")
def test_live_agent_on_the_bridge_and_on_each_host(tmp_path: Path) -> None:
    """The switch's mirrored view and the three hosts' own captures both hold every tier."""
    testbed = _load_testbed()
    requests = 45
    probe = f"wptb-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if made.returncode != 0 and "not permitted" in made.stderr.lower():
        pytest.skip(f"root, but this container may not make network namespaces: {made.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], check=False)
    with testbed.Testbed() as bed:
        agents = {"bridge": _Agent(bed, "sw", "br0", tmp_path / "bridge")}
        for host in ("web", "app", "db"):
            agents[host] = _Agent(bed, host, "eth0", tmp_path / host, "--no-convert")
        try:
            for agent in agents.values():
                assert agent.ready.wait(60), agent.err
            bed.load(requests, concurrency=1)
        finally:
            docs = {name: agent.stop() for name, agent in agents.items()}
        namespaces = list(bed.namespaces)
    assert all(d["packets"]["dropped_kernel"] == 0 for d in docs.values())
    # The switch saw every tier's calls and returns, and nothing else.
    doc = docs["bridge"]
    assert _edges(doc["trace"]) == _expected(requests)
    trace = tracefmt.read_trace(doc["trace"])
    cols = [trace[c].to_pylist() for c in ("receiver", "op", "proto")]
    protos = Counter(zip(*cols, strict=True))
    # The db tier speaks the Redis protocol, the others HTTP.
    assert protos[("db", "call", "redis")] == _expected(requests)[("app", "db", "call")]
    assert protos[("web", "call", "http")] == requests
    assert protos[("app", "call", "http")] == _expected(requests)[("web", "app", "call")]
    # The hosts' captures, merged as capture points, give the same messages.
    files = [f for host in ("web", "app", "db") for f in docs[host]["files"]]
    assert len(files) == 3
    convert_pcaps(files, tmp_path / "hosts.parquet", point_from_file=True)
    assert _edges(tmp_path / "hosts.parquet") == _expected(requests)
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
