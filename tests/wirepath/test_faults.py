"""Faults a long run meets on a busy machine, and what every writing verb does about them.

- A full disk (a small tmpfs, root only): one ``error:`` line that says the disk is full,
  exit 1, no half-written or ``.partial`` file, the previous output and the inputs as they
  were.
- SIGTERM in the middle of a run: exit 130, nothing partial left, the previous output kept.
- SIGKILL in the middle of a run (nothing can clean up): the previous output is intact, and
  a reader polling the output only ever sees the old file or the new one, whole; the next
  run replaces the stale temporary file.
- ``capture live`` killed with SIGKILL mid-capture (root, a private network namespace):
  every finished rotation is readable, the last one up to its last whole record.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import tracefmt
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "samples" / "synth" / "multitier.toml"
PREVIOUS = b"the previous version of this output\n"


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def digests(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative name -> sha256)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def temporary(names: list[str]) -> list[str]:
    return [n for n in names if n.endswith((".partial", ".part"))]


def fill(argv: list[str], names: dict[str, Path]) -> list[str]:
    return [a.format(**{k: str(v) for k, v in names.items()}) for a in argv]


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs of every writing verb, from a 20,000-message synthetic trace."""
    d = tmp_path_factory.mktemp("inputs")
    t = str(d / "t.parquet")
    assert main(["synth", str(CONFIG), "--messages", "20000", "--out", t, "--pcap", str(d / "t.pcap")]) == 0
    assert main(["convert", t, str(d / "t.txt")]) == 0
    argv = ["infer", "nesting", t, "--no-calibrate", "--out", str(d / "p.json"), "--instances"]
    assert main([*argv, str(d / "i.parquet")]) == 0
    shutil.copy(CONFIG, d / "cfg.toml")
    return d


# --- a full disk ----------------------------------------------------------------------

DISK_BYTES = 4 << 20


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of its own, unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0755", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill_disk(disk: Path, leave: int = 0) -> None:
    """Write a filler file until the disk is full, then give back ``leave`` bytes."""
    fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        size = 0
        for block in (b"\0" * 65536, b"\0" * 4096):
            with contextlib.suppress(OSError):
                while True:
                    size += os.write(fd, block)
        os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)
    probe, room = os.open(disk / "probe", os.O_WRONLY | os.O_CREAT, 0o600), 0
    try:
        with contextlib.suppress(OSError):
            while True:
                room += os.write(probe, b"\0" * 4096)
    finally:
        os.close(probe)
        os.unlink(disk / "probe")
    assert room <= leave + 8192, room


#: Each case: the argv ({disk} is the small tmpfs, the rest are inputs in ``small``), the
#: output on the disk (a file, or a directory the verb fills) and whether that output is
#: larger than 64 KiB (then it also runs out of room midway, not only at its first byte).
FULL_DISK = {
    "convert text to parquet": (["convert", "{small}/t.txt", "{disk}/a.parquet"], "a.parquet", True),
    "convert parquet to text": (["convert", "{small}/t.parquet", "{disk}/a.txt"], "a.txt", True),
    "merge": (
        ["merge", "{small}/t.parquet", "{small}/t.parquet", "--no-dedup", "--out", "{disk}/m.parquet"],
        "m.parquet",
        True,
    ),
    "capture pcap": (["capture", "pcap", "{small}/t.pcap", "--out", "{disk}/c.parquet"], "c.parquet", True),
    "synth": (
        ["synth", "{small}/cfg.toml", "--messages", "100000", "--out", "{disk}/s.parquet"],
        "s.parquet",
        True,
    ),
    "synth text": (
        ["synth", "{small}/cfg.toml", "--messages", "20000", "--out", "{disk}/s.txt"],
        "s.txt",
        True,
    ),
    "synth --truth": (
        [
            "synth",
            "{small}/cfg.toml",
            "--messages",
            "20000",
            "--out",
            "{tmp}/s.parquet",
            "--truth",
            "{disk}/s.json",
        ],
        "s.json",
        False,
    ),
    "synth --pcap": (
        [
            "synth",
            "{small}/cfg.toml",
            "--messages",
            "20000",
            "--out",
            "{tmp}/s.parquet",
            "--pcap",
            "{disk}/s.pcap",
        ],
        "s.pcap",
        True,
    ),
    "infer nesting --out": (
        ["infer", "nesting", "{small}/t.parquet", "--no-calibrate", "--out", "{disk}/p.json"],
        "p.json",
        True,
    ),
    "infer nesting --instances": (
        [
            "infer",
            "nesting",
            "{small}/t.parquet",
            "--no-calibrate",
            "--out",
            "{tmp}/p.json",
            "--instances",
            "{disk}/i.parquet",
        ],
        "i.parquet",
        True,
    ),
    "infer convolution": (
        ["infer", "convolution", "{small}/t.parquet", "--quantum", "1ms", "--out", "{disk}/cv.json"],
        "cv.json",
        False,
    ),
    "report": (["report", "{small}/p.json", "--out", "{disk}/r.html"], "r.html", False),
    "export": (["export", "{small}/i.parquet", "--format", "otlp", "--out", "{disk}/e.json"], "e.json", True),
    "viz draw svg": (["viz", "draw", "{small}/p.json", "--out", "{disk}/v.svg"], "v.svg", False),
    "viz draw dot": (["viz", "draw", "{small}/p.json", "--out", "{disk}/v.dot"], "v.dot", False),
    "viz diff": (
        ["viz", "diff", "{small}/p.json", "{small}/p.json", "--out", "{disk}/d.svg"],
        "d.svg",
        False,
    ),
    "demo": (["demo", "--out", "{disk}/demo"], "demo/", False),
    "trend from-paths": (
        ["trend", "from-paths", "{small}/p.json", "--store", "{disk}/store", "--build", "1"],
        "store/",
        False,
    ),
}


def check_disk_full(err: str, disk: Path, output: str, small: Path, inputs: dict[str, str]) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, err
    assert lines[-1] == errors[0], err
    assert "no space left" in errors[0].lower(), errors[0]
    left = [n for n in files_under(disk) if n != "filler"]
    if output.endswith("/"):
        assert left == [], f"files left on the full disk: {left}"
    else:
        assert left == [output], f"files left on the full disk: {left}"
        assert (disk / output).read_bytes() == PREVIOUS
    assert digests(small) == inputs


@pytest.mark.needs_root
@pytest.mark.parametrize("case", list(FULL_DISK))
def test_a_full_disk_gives_one_error_and_keeps_what_was_there(
    case: str, small: Path, disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv, output, _ = FULL_DISK[case]
    if output in ("v.svg", "d.svg", "demo/") and shutil.which("dot") is None:
        pytest.skip("needs graphviz's dot")
    if not output.endswith("/"):
        (disk / output).write_bytes(PREVIOUS)
    inputs = digests(small)
    fill_disk(disk)
    rc, _, err = run(capsys, fill(argv, {"small": small, "disk": disk, "tmp": tmp_path}))
    assert rc == 1, err
    check_disk_full(err, disk, output, small, inputs)


@pytest.mark.needs_root
@pytest.mark.parametrize("case", [c for c, (_, _, big) in FULL_DISK.items() if big])
def test_a_disk_that_fills_midway(
    case: str, small: Path, disk: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """64 KiB free: the output is cut in the middle of its writing, not at its first byte."""
    argv, output, _ = FULL_DISK[case]
    (disk / output).write_bytes(PREVIOUS)
    inputs = digests(small)
    fill_disk(disk, leave=64 << 10)
    rc, _, err = run(capsys, fill(argv, {"small": small, "disk": disk, "tmp": tmp_path}))
    assert rc == 1, err
    check_disk_full(err, disk, output, small, inputs)


@pytest.mark.needs_root
def test_the_same_run_succeeds_once_there_is_room(small: Path, disk: Path, capsys) -> None:
    """Nothing of the failed run is in the way of the next one."""
    fill_disk(disk, leave=64 << 10)
    argv = ["convert", str(small / "t.txt"), str(disk / "a.parquet")]
    assert run(capsys, argv)[0] == 1
    (disk / "filler").unlink()
    rc, _, err = run(capsys, argv)
    assert rc == 0, err
    assert files_under(disk) == ["a.parquet"]
    assert (
        tracefmt.read_trace(disk / "a.parquet").num_rows == tracefmt.read_trace(small / "t.parquet").num_rows
    )


# --- SIGTERM at the worst moment: the output written whole, not yet in place ------------


def _sigterm_then(real: Callable[..., None]) -> Callable[..., None]:
    def commit(*args: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises KeyboardInterrupt here
        real(*args)

    return commit


#: Every verb that writes files, each with its output named ``OUT`` (a file) or ``OUTDIR``.
SIGTERM_IN_PROCESS = {
    "convert": (["convert", "{small}/t.txt", "{out}/o.parquet"], "o.parquet"),
    "convert to text": (["convert", "{small}/t.parquet", "{out}/o.txt"], "o.txt"),
    "merge": (["merge", "{small}/t.parquet", "{small}/t.parquet", "--out", "{out}/o.parquet"], "o.parquet"),
    "capture pcap": (["capture", "pcap", "{small}/t.pcap", "--out", "{out}/o.parquet"], "o.parquet"),
    "synth": (["synth", "{small}/cfg.toml", "--messages", "5000", "--out", "{out}/o.parquet"], "o.parquet"),
    "synth --truth": (
        [
            "synth",
            "{small}/cfg.toml",
            "--messages",
            "5000",
            "--out",
            "{out}/s.parquet",
            "--truth",
            "{out}/o.json",
        ],
        "o.json",
    ),
    "infer nesting": (
        ["infer", "nesting", "{small}/t.parquet", "--no-calibrate", "--out", "{out}/o.json"],
        "o.json",
    ),
    "infer nesting --instances": (
        [
            "infer",
            "nesting",
            "{small}/t.parquet",
            "--no-calibrate",
            "--out",
            "{out}/p.json",
            "--instances",
            "{out}/o.parquet",
        ],
        "o.parquet",
    ),
    "infer convolution": (
        ["infer", "convolution", "{small}/t.parquet", "--quantum", "1ms", "--out", "{out}/o.json"],
        "o.json",
    ),
    "report": (["report", "{small}/p.json", "--out", "{out}/o.html"], "o.html"),
    "export": (["export", "{small}/i.parquet", "--format", "zipkin", "--out", "{out}/o.json"], "o.json"),
    "viz draw": (["viz", "draw", "{small}/p.json", "--out", "{out}/o.dot"], "o.dot"),
    "viz diff": (["viz", "diff", "{small}/p.json", "{small}/p.json", "--out", "{out}/o.dot"], "o.dot"),
}


@pytest.mark.parametrize("case", list(SIGTERM_IN_PROCESS))
def test_sigterm_as_the_output_is_put_in_place_keeps_the_previous_one(
    case: str, small: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("SIGTERM has a handler in this process")
    argv, output = SIGTERM_IN_PROCESS[case]
    out = tmp_path / "out"
    out.mkdir()
    (out / output).write_bytes(PREVIOUS)
    # Every output is put in place by OutputFile.commit.
    monkeypatch.setattr(tracefmt.OutputFile, "commit", _sigterm_then(tracefmt.OutputFile.commit))
    rc, _, err = run(capsys, fill(argv, {"small": small, "out": out}))
    assert rc == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted; partial outputs were removed"
    assert (out / output).read_bytes() == PREVIOUS
    assert temporary(files_under(out)) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


# --- real processes, signalled while they write -----------------------------------------


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Inputs that take seconds to process: a million-message trace (Parquet and text), a
    200,000-message trace with its 100 MB capture, and its inferred instances."""
    d = tmp_path_factory.mktemp("big")
    t = str(d / "t.parquet")
    argv = ["synth", str(CONFIG), "--messages", "1000000", "--parallelism", "10", "--out", t]
    assert main(argv) == 0
    assert main(["convert", t, str(d / "t.txt")]) == 0
    s = str(d / "s.parquet")
    assert main(["synth", str(CONFIG), "--messages", "200000", "--out", s, "--pcap", str(d / "s.pcap")]) == 0
    # The paper's preset: a third of the default's time, the same files to read.
    argv = ["infer", "nesting", s, "--preset", "paper", "--out", str(d / "p.json"), "--instances"]
    assert main([*argv, str(d / "i.parquet")]) == 0
    shutil.copy(CONFIG, d / "cfg.toml")
    return d


def start(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "wirepath", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        # As a service manager starts it: SIGTERM at its default action (a test runner
        # may hand its children an ignored one, which wirepath respects).
        preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_DFL),
    )


def wait_until(proc: subprocess.Popen[str], ready: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``ready`` until it holds (True) or the process ends or time runs out (False)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and proc.poll() is None:
        if ready():
            return True
        time.sleep(0.01)
    return False


def writing(folder: Path, min_bytes: int = 1) -> Callable[[], bool]:
    """True once a temporary output in ``folder`` holds ``min_bytes``."""

    def ready() -> bool:
        with contextlib.suppress(OSError):
            return any(
                p.stat().st_size >= min_bytes
                for p in folder.iterdir()
                if p.name.endswith((".partial", ".part"))
            )
        return False

    return ready


#: Long-running writing verbs not covered elsewhere (synth and infer nesting are:
#: tests/synth/test_cli_hostile.py, tests/wirepath/test_sigterm.py): the argv, and whether
#: they write as they go (signalled once their temporary file grows) or at the end
#: (signalled after ``seconds`` of work).
SIGTERM_CASES = {
    "convert text to parquet": (["convert", "{big}/t.txt", "{out}/o.parquet"], None),
    "convert parquet to text": (["convert", "{big}/t.parquet", "{out}/o.txt"], None),
    "merge": (["merge", "{big}/t.parquet", "{big}/t.parquet", "--out", "{out}/o.parquet"], None),
    "capture pcap": (["capture", "pcap", "{big}/s.pcap", "--out", "{out}/o.parquet"], None),
    "synth --pcap": (
        [
            "synth",
            "{big}/cfg.toml",
            "--messages",
            "200000",
            "--out",
            "{out}/s.parquet",
            "--pcap",
            "{out}/o.pcap",
        ],
        None,
    ),
    "export": (["export", "{big}/i.parquet", "--format", "jaeger", "--out", "{out}/o.json"], None),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SIGTERM_CASES))
def test_sigterm_mid_run_leaves_nothing_partial(case: str, big: Path, tmp_path: Path) -> None:
    argv, seconds = SIGTERM_CASES[case]
    out = tmp_path / "out"
    out.mkdir()
    proc = start(fill(argv, {"big": big, "out": out}))
    if seconds is None:
        caught = wait_until(proc, writing(out, 64 << 10), 60)
    else:
        caught = not wait_until(proc, lambda: False, seconds)
    assert caught, "the run ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "error: interrupted; partial outputs were removed"
    left = files_under(out)
    assert temporary(left) == []
    # What was finished before the signal (synth's trace before its capture) is whole.
    for name in left:
        assert name == "s.parquet", left
        assert tracefmt.read_trace(out / name).num_rows > 0


#: Writers killed with SIGKILL while their temporary file grows: the argv and the output
#: (already there, from an earlier run, before the killed one starts).
SIGKILL_CASES = {
    "synth": ["synth", "{big}/cfg.toml", "--messages", "1000000", "--out", "{out}/o.parquet"],
    "capture pcap": ["capture", "pcap", "{big}/s.pcap", "--out", "{out}/o.parquet"],
    "convert": ["convert", "{big}/t.txt", "{out}/o.parquet"],
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SIGKILL_CASES))
def test_sigkill_mid_write_keeps_the_previous_output(case: str, big: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(big / "s.parquet", out / "o.parquet")
    previous = (out / "o.parquet").read_bytes()
    argv = fill(SIGKILL_CASES[case], {"big": big, "out": out})
    proc = start(argv)
    caught = wait_until(proc, writing(out, 256 << 10), 60)
    assert caught, "the run ended before it could be killed"
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert (out / "o.parquet").read_bytes() == previous
    left = temporary(files_under(out))  # nothing could remove it
    assert len(left) == 1, left
    assert re.fullmatch(r"\.o\.parquet\.[a-z0-9_]{8}\.partial", left[0]), left
    # The next run removes the stale temporary file (no one holds it) and publishes a whole trace.
    proc = start(argv)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert files_under(out) == ["o.parquet"]
    assert tracefmt.read_trace(out / "o.parquet").num_rows > 200_000


def _read_whole(path: Path) -> str:
    """What a reader of ``path`` finds: 'missing', or the digest of a file it could parse whole."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return "missing"
    if path.suffix == ".json":
        json.loads(data)
    elif path.name == "t.parquet":
        tracefmt.read_trace(path)
    else:
        pq.read_table(path)
    return hashlib.sha256(data).hexdigest()


#: Runs watched by a reader: the argv and the outputs it polls (each there before the run,
#: from an earlier one with other settings).
WATCHED = {
    "synth": (
        ["synth", "{big}/cfg.toml", "--messages", "1000000", "--out", "{out}/t.parquet"],
        ["t.parquet"],
    ),
    "infer nesting": (
        [
            "infer",
            "nesting",
            "{big}/s.parquet",
            "--no-calibrate",
            "--out",
            "{out}/p.json",
            "--instances",
            "{out}/i.parquet",
        ],
        ["p.json", "i.parquet"],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(WATCHED))
def test_a_reader_sees_the_old_file_or_the_new_one_never_half(case: str, big: Path, tmp_path: Path) -> None:
    argv, outputs = WATCHED[case]
    out = tmp_path / "out"
    out.mkdir()
    # Other files than the run makes: a smaller trace, the paths file laid out otherwise.
    sources = {"t.parquet": big / "s.parquet", "i.parquet": big / "s.parquet"}
    for name in outputs:
        if name == "p.json":
            (out / name).write_text(json.dumps(json.loads((big / "p.json").read_text())))
        else:
            shutil.copy(sources[name], out / name)
    old = {name: _read_whole(out / name) for name in outputs}
    proc = start(fill(argv, {"big": big, "out": out}))
    seen: dict[str, set[str]] = {name: set() for name in outputs}
    reads = 0
    while proc.poll() is None:
        for name in outputs:
            seen[name].add(_read_whole(out / name))  # raises on a half-written file
            reads += 1
    _, err = proc.communicate()
    assert proc.returncode == 0, err
    new = {name: _read_whole(out / name) for name in outputs}
    for name in outputs:
        assert seen[name] <= {old[name], new[name]}, name
        assert new[name] != old[name]
    assert reads > 20
    assert temporary(files_under(out)) == []


# --- the live agent killed mid-capture ----------------------------------------------------


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace whose loopback nobody else uses."""
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, packet capture)")
    if shutil.which("tcpdump") is None:
        pytest.skip("needs tcpdump")
    name = f"wpf-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make a network namespace here: {made.stderr.strip()}")
    try:
        subprocess.run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


_UDP_SENDER = """
import socket, sys, time
n = int(sys.argv[1])
rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); rx.bind(("127.0.0.1", 9999))
tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for k in range(n):
    tx.sendto(b"wirepath-fault %08d " % k + b"x" * 400, ("127.0.0.1", 9999))
    if k % 200 == 0:
        time.sleep(0.01)
        while True:
            try:
                rx.recv(2048, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
"""


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def whole_records(path: Path) -> tuple[int, int]:
    """(whole records, bytes after the last whole one) of a pcap file, every whole record's
    header checked (a length within the snapshot length)."""
    data = path.read_bytes()
    assert len(data) >= 24, f"{path.name}: no pcap header"
    magic, snaplen = int.from_bytes(data[:4], "little"), int.from_bytes(data[16:20], "little")
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), f"{path.name}: magic {magic:#x}"
    at, records = 24, 0
    while at + 16 <= len(data):
        incl, orig = (
            int.from_bytes(data[at + 8 : at + 12], "little"),
            int.from_bytes(data[at + 12 : at + 16], "little"),
        )
        assert incl <= snaplen, f"{path.name}: record {records} claims {incl} bytes"
        assert incl <= orig, f"{path.name}: record {records} keeps more than it saw"
        if at + 16 + incl > len(data):
            break
        at, records = at + 16 + incl, records + 1
    return records, len(data) - at


@pytest.mark.slow
@pytest.mark.needs_root
def test_capture_live_killed_mid_capture_keeps_its_rotations(
    netns: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cap"
    cmd = ["ip", "netns", "exec", netns, sys.executable, "-m", "wirepath", "capture", "live", "--iface", "lo"]
    cmd += ["--out", str(out), "--rotate-mb", "1", "--filter", "udp port 9999"]
    log = tmp_path / "agent.log"
    with log.open("w") as err:
        agent = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    sender = None
    try:
        recording = wait_until(agent, lambda: "recording " in log.read_text(), 30)
        assert recording, log.read_text()
        sender = subprocess.Popen(["ip", "netns", "exec", netns, sys.executable, "-c", _UDP_SENDER, "40000"])
        # Killed while packets still flow, with at least three files rotated out.
        assert wait_until(agent, lambda: len(list(out.glob("*.pcap*"))) >= 4, 60), "no rotations"
        assert sender.poll() is None, "the traffic ended before the agent could be killed"
        helpers = _children(agent.pid)
        agent.kill()
        agent.wait(30)
    finally:
        if sender is not None:
            sender.kill()
            sender.wait()
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    # tcpdump, told by the kernel that its parent died, finishes its file and ends.
    end = time.monotonic() + 20
    while any(_alive(p) for p in helpers) and time.monotonic() < end:
        time.sleep(0.1)
    orphans = [p for p in helpers if _alive(p)]
    for p in orphans:
        os.kill(p, signal.SIGKILL)
    assert orphans == [], "tcpdump outlived the killed agent"
    files = sorted(out.glob("*.pcap*"), key=lambda p: (len(p.name), p.name))
    assert len(files) >= 4
    for f in files[:-1]:
        records, rest = whole_records(f)
        assert records > 1000, f.name
        assert rest == 0, f"{f.name}: a finished rotation ends in {rest} bytes of a cut record"
    records, rest = whole_records(files[-1])
    assert rest < 16 + 65536, files[-1].name
    # wirepath reads every file, the last one up to its last whole record.
    argv = ["capture", "pcap", *map(str, files), "--out", str(tmp_path / "t.parquet")]
    rc, _, err = run(capsys, argv)
    assert rc == 0, err
    # The parts converted while recording are whole traces (each was published whole).
    for part in sorted((out / "trace").glob("part-*.parquet")):
        tracefmt.read_trace(part)
