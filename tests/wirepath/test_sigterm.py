"""SIGTERM ends any verb the way Ctrl-C does: exit 130, one line, and no half-written
output left behind (a service manager or a CI timeout stops runs this way)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import synth

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def big_text(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from dataclasses import replace

    path = tmp_path_factory.mktemp("big") / "t.txt"
    cfg = replace(synth.load_config(ROOT / "samples" / "synth" / "multitier.toml"), messages=3_000_000)
    synth.generate_trace(cfg, path)
    return path


def test_sigterm_during_convert_leaves_nothing(big_text: Path, tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirepath", "convert", str(big_text), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    partial = tmp_path / ".t.parquet.partial"
    deadline = time.monotonic() + 30
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert partial.exists(), "the conversion finished before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip().splitlines() == ["error: interrupted; partial outputs were removed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
