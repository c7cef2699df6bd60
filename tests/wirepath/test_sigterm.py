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


#: A run interrupted once (as SIGTERM's handler does) that meets a second interrupt while
#: it reports the first: SIGINT tripped as the line is written, as pyarrow's cancellation
#: hands on a signal it caught, or as a second signal comes under load.
_LATE_SIGNAL = r"""
import _thread, contextlib, sys
import tracefmt

class Stderr:
    def __init__(self, real):
        self.real = real
    def write(self, text):
        if "interrupted" in text:
            _thread.interrupt_main()
        return self.real.write(text)
    def flush(self):
        self.real.flush()

@contextlib.contextmanager
def interrupted():
    raise KeyboardInterrupt
    yield

tracefmt.sigterm_as_interrupt = interrupted
sys.stderr = Stderr(sys.stderr)
sys.argv = ["wirepath", "info", "x.parquet"]
from wirepath.cli import run
run()
"""


def test_a_second_signal_while_reporting_the_first_still_exits_130(tmp_path: Path) -> None:
    # Issue 39, item 23: the process printed its line, then died by SIGINT (-2).
    proc = subprocess.run(
        [sys.executable, "-c", _LATE_SIGNAL], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "error: interrupted; partial outputs were removed"


def test_a_signal_after_the_run_ended_does_not_change_its_status(tmp_path: Path) -> None:
    code = (
        "import _thread, sys\n"
        "import wirepath.cli as cli\n"
        "main = cli.main\n"
        "def late(*a, **k):\n"
        "    code = main(['--version'])\n"
        "    _thread.interrupt_main()\n"
        "    return code\n"
        "cli.main = late\n"
        "cli.run()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=60
    )
    assert proc.returncode in (0, 130), proc.stderr
    assert "Traceback" not in proc.stderr
