"""SIGTERM ends any verb the way Ctrl-C does: exit 130, one line, and no half-written
output left behind (a service manager or a CI timeout stops runs this way)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import synth

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("big") / "t.parquet"
    cfg = synth.load_config(ROOT / "samples" / "synth" / "multitier.toml")
    synth.generate_trace(replace(cfg, messages=1_000_000, parallelism=10.0), path)
    return path


def test_sigterm_during_inference_leaves_nothing(big_trace: Path, tmp_path: Path) -> None:
    # Inference of a million messages takes seconds: the signal finds it at work, before
    # it writes anything (infer has no signal handling of its own: main's is tested).
    out, inst = tmp_path / "p.json", tmp_path / "i.parquet"
    argv = ["infer", "nesting", str(big_trace), "--out", str(out), "--instances", str(inst)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirepath", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As a service manager starts it: SIGTERM at its default action (a test runner
        # may hand its children an ignored one, which wirepath respects).
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    time.sleep(2.0)
    assert proc.poll() is None, "the inference ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted; partial outputs were removed"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
