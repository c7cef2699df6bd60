"""``wirepath synth`` fed the inputs of a hostile-input probe: each is one error line and
exit status 1 (checked before anything is drawn or written), or, for SIGTERM, a clean exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from wirepath.cli import main

TOML = """\
nodes = ["client", "A", "B"]

[trace]
seed = 5
messages = 5000

[[tracelet]]
name = "req"
client = "client"
clients = 3
think_s = [0.0, 0.01]

[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.002, 0.0005]

[[tracelet.call]]
id = "b"
parent = "a"
to = "B"
before_s = [0.003, 0.0005]
"""


def _config(tmp_path: Path, text: str = TOML) -> Path:
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _line(text: str, needle: str) -> int:
    return text.splitlines().index(needle) + 1


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], config: Path, *flags: str) -> str:
    """Run synth; check exit 1, nothing on stdout, nothing written; the one error line."""
    rc = main(["synth", str(config), "--out", str(tmp_path / "t.parquet"), *flags])
    out, err = capsys.readouterr()
    assert rc == 1, err
    assert out == ""
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.name]  # no trace, no .partial
    return lines[0]


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        pytest.param(
            ["--messages", str(10**12)],
            f"error: --messages: must be between 1 and 1,000,000,000, not {10**12}",
            id="messages-1e12",
        ),
        pytest.param(
            ["--parallelism", "1e8"],
            "error: --parallelism: must be between 1e-09 and 1,000, not 100000000.0",
            id="parallelism-1e8",
        ),
        pytest.param(
            ["--skew", "A=1e12s"],
            "error: --skew: A: duration '1e12s' is too long (at most 6,307,200,000 s)",
            id="skew-1e12",
        ),
        pytest.param(
            ["--duration", "1e400s"],
            "error: --duration: duration '1e400s' is too long (at most 6,307,200,000 s)",
            id="duration-1e400",
        ),
        pytest.param(
            ["--parallelism", "inf"],
            "error: --parallelism: must be between 1e-09 and 1,000, not inf",
            id="parallelism-inf",
        ),
        pytest.param(
            ["--seed", "-1"],
            "error: --seed: must be between 0 and 9,223,372,036,854,775,807, not -1",
            id="seed-negative",
        ),
        pytest.param(
            ["--messages", "0"],
            "error: --messages: must be between 1 and 1,000,000,000, not 0",
            id="messages-0",
        ),
        pytest.param(
            ["--loss-rate", "-1"],
            "error: --loss-rate: must be between 1e-09 and 1,000,000,000,000, not -1.0",
            id="loss-rate-negative",
        ),
        pytest.param(
            ["--parallelism", "0"],
            "error: --parallelism: must be between 1e-09 and 1,000, not 0.0",
            id="parallelism-0",
        ),
        pytest.param(
            ["--loss-rate", "100", "--loss-queue", "-1"],
            "error: --loss-queue: must be between 1 and 1,000,000,000, not -1",
            id="queue-negative",
        ),
        pytest.param(
            ["--loss-queue", "-1"],
            "error: --loss-queue needs a capture rate: --loss-rate PPS",
            id="queue-without-rate",
        ),
        pytest.param(
            ["--skew", "A=1e400s"],
            "error: --skew: A: duration '1e400s' is too long (at most 6,307,200,000 s)",
            id="skew-past-float",
        ),
        pytest.param(
            ["--parallelism", "nan"],
            "error: --parallelism: must be between 1e-09 and 1,000, not nan",
            id="parallelism-nan",
        ),
        pytest.param(
            ["--duration", "0"],
            "error: --duration: must be between 1e-09 and 1,000,000,000, not 0.0",
            id="duration-0",
        ),
    ],
)
def test_flags_are_held_to_the_file_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], line: str
) -> None:
    assert _refused(tmp_path, capsys, _config(tmp_path), *flags) == line


@pytest.mark.parametrize(
    ("old", "new", "field", "problem"),
    [
        pytest.param(
            'to = "B"\n',
            'to = "B"\nrepeat = 1000000000\n',
            "tracelet.call.repeat",
            "must be a count >= 1 or [min, max] counts (at most 10,000), not 1000000000",
            id="repeat-1e9",
        ),
        pytest.param(
            "seed = 5\n",
            'seed = 5\nstart = "9999-01-01T00:00:00Z"\n',
            "trace.start",
            "must be an instant from 1970-01-01T00:00:00Z to 2200-01-01T00:00:00Z, "
            "not '9999-01-01T00:00:00Z'",
            id="start-9999",
        ),
        pytest.param(
            "before_s = [0.002, 0.0005]\n",
            "before_s = [1e15, 0]\n",
            "tracelet.call.before_s",
            "mean must be between 0 and 86,400, not 1000000000000000.0",
            id="before-1e15",
        ),
        pytest.param(
            "before_s = [0.002, 0.0005]\n",
            "before_s = [nan, 0]\n",
            "tracelet.call.before_s",
            "mean must be between 0 and 86,400, not nan",
            id="before-nan",
        ),
        pytest.param(
            "think_s = [0.0, 0.01]\n",
            "think_s = [0.0, inf]\n",
            "tracelet.think_s",
            "must be [min, max] seconds with 0 <= min <= max <= 86,400, not [0.0, inf]",
            id="think-inf",
        ),
        pytest.param(
            "clients = 3\n",
            "clients = 100000000\n",
            "tracelet.clients",
            "must be between 1 and 100,000, not 100000000",
            id="clients-1e8",
        ),
        pytest.param(
            "messages = 5000\n",
            "messages = 5000\nduration_s = 5\n",
            "trace.duration_s",
            "give messages = N or duration_s = S, not both",
            id="messages-and-duration",
        ),
    ],
)
def test_file_values_out_of_bounds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, field: str, problem: str
) -> None:
    text = TOML.replace(old, new, 1)
    config = _config(tmp_path, text)
    number = _line(text, new.splitlines()[-1])
    assert _refused(tmp_path, capsys, config) == f"error: {config}:{number}: {field}: {problem}"


def test_skew_in_the_file_is_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TOML + "\n[faults.skew]\nA = 1e12\n"
    config = _config(tmp_path, text)
    assert _refused(tmp_path, capsys, config) == (
        f"error: {config}:{_line(text, 'A = 1e12')}: faults.skew.A: "
        "must be between -86,400 and 86,400, not 1000000000000.0"
    )


def test_repeats_that_multiply_past_the_instance_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = TOML.replace('to = "B"\n', 'to = "B"\nrepeat = 200\n') + (
        '\n[[tracelet.call]]\nid = "c"\nparent = "b"\nto = "A"\nrepeat = 100\n'
    )
    config = _config(tmp_path, text)
    assert _refused(tmp_path, capsys, config) == (
        f"error: {config}:{_line(text, '[[tracelet]]')}: tracelet: one instance makes more than "
        "10,000 calls (repeats expanded); lower repeat or split the tracelet"
    )


def test_calls_nested_too_deep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    calls = "".join(
        f'\n[[tracelet.call]]\nid = "c{i}"\n' + (f'parent = "c{i - 1}"\n' if i else "") + 'to = "A"\n'
        for i in range(2000)
    )
    text = 'nodes = ["client", "A"]\n[trace]\nmessages = 10\n[[tracelet]]\nclient = "client"\n' + calls
    config = _config(tmp_path, text)
    assert _refused(tmp_path, capsys, config) == (
        f"error: {config}:4: tracelet: calls nest 2000 deep (at most 64)"
    )


def test_loops_times_calls_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = TOML.replace("clients = 3\n", "clients = 90000\n").replace('to = "B"\n', 'to = "B"\nrepeat = 20\n')
    config = _config(tmp_path, text)
    assert _refused(tmp_path, capsys, config) == (
        f"error: {config}: 90,000 client loops of 21 calls per instance at most make 1,890,000 calls "
        "at once (at most 100,000 loops and 250,000 calls: loops x calls per instance); "
        "lower the parallelism, clients or repeat"
    )


def test_a_duration_past_the_message_bound_is_refused_before_drawing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refused(tmp_path, capsys, _config(tmp_path), "--duration", "1e8s")
    assert line.startswith(f"error: {tmp_path / 'c.toml'}: 1e+08 s of this workload make about "), line
    assert "more than the limit of 1,000,000,000; give a duration of at most about" in line


def test_messages_drop_the_files_duration(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _config(tmp_path, TOML.replace("messages = 5000\n", "duration_s = 1000\n"))
    out = tmp_path / "t.txt"
    rc = main(["synth", str(config), "--out", str(out), "--messages", "400"])
    assert rc == 0, capsys.readouterr().err
    assert "wrote 400 messages" in capsys.readouterr().out


def test_sigterm_removes_the_partial_trace(tmp_path: Path) -> None:
    """A real process, stopped by SIGTERM while it writes: exit 130, nothing left behind."""
    config = _config(tmp_path, TOML.replace("messages = 5000", "messages = 200000000"))
    out = tmp_path / "t.parquet"
    proc = subprocess.Popen(
        [sys.executable, "-m", "wirepath", "synth", str(config), "--out", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # SIGTERM at its default action, as a service manager starts it (a test runner
        # may hand its children an ignored one, which wirepath respects).
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60

    def writing() -> bool:
        return bool(list(tmp_path.glob(".t.parquet.*.partial")))

    while not writing() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert writing(), "the run never started writing"
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == ["error: interrupted; partial outputs were removed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.name]
