"""A progress bar (tqdm) on stderr when it is a terminal: for capture pcap the bytes of
the files read, the rate, the time left, the packets and messages; nothing into a pipe
or a log, and nothing with --quiet."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PCAP = ROOT / "samples" / "testbed" / "bridge.pcap"
WIREPATH = [sys.executable, "-m", "wirepath"]


def _stderr_on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """Run ``argv`` with stderr on a pseudo-terminal of 100 columns; what it drew."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=slave, close_fds=True)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    return proc.wait(), drawn.decode(errors="replace")


def test_capture_draws_a_bar_over_the_files_on_a_terminal(tmp_path: Path) -> None:
    rc, drawn = _stderr_on_a_terminal(
        [*WIREPATH, "capture", "pcap", str(PCAP), "--out", str(tmp_path / "t.parquet")]
    )
    assert rc == 0
    assert "capture:" in drawn
    assert "B/s" in drawn  # a rate in bytes: the bar follows the files' size


def test_quiet_draws_nothing(tmp_path: Path) -> None:
    argv = [*WIREPATH, "capture", "pcap", str(PCAP), "--out", str(tmp_path / "t.parquet"), "--quiet"]
    rc, drawn = _stderr_on_a_terminal(argv)
    assert rc == 0
    assert drawn == ""


def test_nothing_is_drawn_into_a_pipe(tmp_path: Path) -> None:
    done = subprocess.run(
        [*WIREPATH, "capture", "pcap", str(PCAP), "--out", str(tmp_path / "t.parquet")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stderr == ""


def test_infer_nesting_names_each_step_on_a_terminal(tmp_path: Path) -> None:
    """Inference takes minutes on a large trace: each stage, each calibration twin and
    the patterns are named as they end, with the time so far; nothing into a pipe."""
    trace = tmp_path / "t.parquet"
    synth = [*WIREPATH, "synth", str(ROOT / "samples" / "synth" / "multitier.toml"), "--messages", "5000"]
    subprocess.run([*synth, "--out", str(trace)], check=True, capture_output=True)
    argv = [*WIREPATH, "infer", "nesting", str(trace), "--out", str(tmp_path / "p.json")]
    rc, drawn = _stderr_on_a_terminal(argv)
    assert rc == 0
    for words in ("nesting: reading the input", "call pairs", "stage 1: first pass", "chain round",
                  "calibration: the twin", "patterns (step"):  # fmt: skip
        assert words in drawn, words
    piped = subprocess.run(argv, capture_output=True, text=True, check=True)
    assert piped.stderr == ""
