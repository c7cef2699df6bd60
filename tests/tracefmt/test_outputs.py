"""The one output helper (``OutputFile`` and what is built on it): what it replaces is
checked as a file (device and inode), it never renames over anything but a regular
file, every writer has a temporary of its own, and modes do not follow a permissive
umask."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
from pathlib import Path

import pyarrow as pa
import pytest

import tracefmt
from tracefmt import OutputFile, ParameterError, TraceFileError, TraceWriter, read_trace, write_trace

IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="needs root (mknod, mount)")


@pytest.fixture
def trace(make_table) -> pa.Table:
    return tracefmt.validate_trace(make_table([(k, "send", "a", "b", None) for k in range(100)]))


def null_device(path: Path) -> Path:
    """A twin of /dev/null (character device 1:3) at ``path``."""
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return path


# --- what is replaced -----------------------------------------------------------------------


@root_only
@pytest.mark.parametrize("writer", ["write_atomic", "write_trace", "write_text_trace"])
def test_a_character_device_is_written_into_never_replaced(tmp_path: Path, trace, writer) -> None:
    dev = null_device(tmp_path / "null")
    {
        "write_atomic": lambda: tracefmt.write_atomic(dev, "text"),
        "write_trace": lambda: write_trace(trace, dev),
        "write_text_trace": lambda: tracefmt.write_text_trace(trace, dev),
    }[writer]()
    assert stat.S_ISCHR(dev.stat().st_mode)
    assert dev.stat().st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


@pytest.mark.parametrize("whole", [True, False], ids=["whole", "failed"])
def test_a_fifo_is_written_into_never_replaced(tmp_path: Path, trace, whole: bool) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    if whole:
        write_trace(trace, fifo)  # a Parquet writer asks where it is: a FIFO cannot say
    else:
        w = TraceWriter(fifo)
        w.write(trace)
        w.abort()
    reader.join(30)
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # a failure must not remove it either
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]
    if whole:
        (tmp_path / "copy.parquet").write_bytes(got[0])
        assert read_trace(tmp_path / "copy.parquet").equals(trace)


def test_a_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(path))
        with pytest.raises(TraceFileError, match=r"s: is a socket, not a file \(give a file name\)"):
            tracefmt.write_atomic(path, "x")
        assert stat.S_ISSOCK(path.stat().st_mode)


def test_a_symbolic_link_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    (tmp_path / "link.txt").symlink_to(real)
    tracefmt.write_atomic(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink()
    assert real.read_text() == "new"


# --- outputs against inputs -----------------------------------------------------------------


def test_a_hard_link_of_the_input_is_the_input(tmp_path: Path) -> None:
    (tmp_path / "t.parquet").write_bytes(b"x")
    os.link(tmp_path / "t.parquet", tmp_path / "u.parquet")
    with pytest.raises(ParameterError, match="output would overwrite the input"):
        tracefmt.distinct_outputs([tmp_path / "t.parquet"], [tmp_path / "u.parquet"])


def test_proc_fd_of_the_input_is_the_input(tmp_path: Path) -> None:
    (tmp_path / "t.parquet").write_bytes(b"x")
    with (
        open(tmp_path / "t.parquet", "rb") as f,
        pytest.raises(ParameterError, match="output would overwrite the input"),
    ):
        tracefmt.distinct_outputs([tmp_path / "t.parquet"], [f"/proc/self/fd/{f.fileno()}"])


@root_only
def test_the_input_under_a_bind_mount_is_the_input(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "t.parquet").write_bytes(b"keep")
    if subprocess.run(["mount", "--bind", str(a), str(b)], capture_output=True).returncode:
        pytest.skip("bind mounts are not allowed here")
    try:
        with pytest.raises(ParameterError, match="output would overwrite the input"):
            tracefmt.distinct_outputs([a / "t.parquet"], [b / "t.parquet"])
        (a / "ds").mkdir()
        with pytest.raises(ParameterError, match="output would be written into the input"):
            tracefmt.distinct_outputs([a / "ds"], [b / "ds" / "part-00001.parquet"])
    finally:
        subprocess.run(["umount", str(b)], check=True)
    assert (a / "t.parquet").read_bytes() == b"keep"


def test_an_output_inside_an_input_dataset_is_refused(tmp_path: Path, trace) -> None:
    ds = tmp_path / "ds"
    write_trace(trace, ds, partition="10")
    for out in (ds / "part-00001.parquet", ds / "new.json", ds / "sub" / "x.parquet"):
        with pytest.raises(ParameterError) as err:
            tracefmt.distinct_outputs([ds], [out])
        assert str(err.value) == (
            f"{out}: output would be written into the input {ds} (a directory read as input); "
            "choose a place outside it"
        )
    tracefmt.distinct_outputs([ds], [tmp_path / "ds.json"])  # beside it is fine


def test_a_dataset_over_the_directory_holding_its_input_is_refused(tmp_path: Path, trace) -> None:
    ds = tmp_path / "ds"
    write_trace(trace, ds, partition="10")
    with pytest.raises(ParameterError, match="output would replace the directory holding the input"):
        tracefmt.distinct_outputs([ds / "part-00000.parquet"], [ds])


def test_an_input_named_like_a_temporary_of_the_output_is_refused(tmp_path: Path) -> None:
    cfg = tmp_path / ".t.parquet.abcd1234.partial"
    cfg.write_text("keep")
    with pytest.raises(ParameterError, match="named like its temporary file"):
        tracefmt.distinct_outputs([cfg], [tmp_path / "t.parquet"])


# --- temporaries ----------------------------------------------------------------------------


def test_two_writers_of_one_file_at_once_leave_the_last_one_whole(tmp_path: Path, trace) -> None:
    out = tmp_path / "c.parquet"
    first, second = TraceWriter(out), TraceWriter(out)
    first.write(trace)
    second.write(trace.slice(0, 10))
    first.close()
    assert read_trace(out).equals(trace)
    second.close()
    assert read_trace(out).equals(trace.slice(0, 10))
    assert [p.name for p in tmp_path.iterdir()] == ["c.parquet"]


def test_a_killed_writers_temporary_is_swept_a_living_ones_kept(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    dead = tmp_path / ".o.txt.k1ll3d_1.partial"
    dead.write_text("left by SIGKILL")
    living = OutputFile(out)
    living.open().write_text("still being written")
    tracefmt.write_atomic(out, "done")
    assert not dead.exists()
    assert living.tmp is not None
    assert living.tmp.read_text() == "still being written"
    living.commit()
    assert out.read_text() == "still being written"
    assert [p.name for p in tmp_path.iterdir()] == ["o.txt"]


def test_a_discarded_write_leaves_the_previous_file(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    out.write_text("previous")
    output = OutputFile(out)
    output.open().write_text("half")
    output.discard()
    assert out.read_text() == "previous"
    assert [p.name for p in tmp_path.iterdir()] == ["o.txt"]


def test_a_long_name_leaves_room_for_the_temporary(tmp_path: Path) -> None:
    tracefmt.write_atomic(tmp_path / ("x" * 237), "fits")
    with pytest.raises(ParameterError, match=r"file name too long \(at most 237 bytes\)"):
        tracefmt.write_atomic(tmp_path / ("x" * 238), "does not")


# --- modes ----------------------------------------------------------------------------------


def test_umask_000_gives_files_0644_and_directories_0755(tmp_path: Path, trace, umask) -> None:
    with umask(0):
        tracefmt.write_atomic(tmp_path / "a" / "b" / "f.txt", "x")
        write_trace(trace, tmp_path / "new" / "ds", partition="50")
        write_trace(trace, tmp_path / "t.parquet")
        store = tracefmt.Store.create(tmp_path / "store")
    modes = {
        str(p.relative_to(tmp_path)): stat.S_IMODE(p.stat().st_mode) for p in sorted(tmp_path.rglob("*"))
    }
    assert {name: oct(m) for name, m in modes.items() if m not in (0o644, 0o755)} == {}
    for d in ("a", "a/b", "new", "new/ds", *(f"store/{n}" for n in tracefmt.STORE_DIRS)):
        assert modes[d] == 0o755, d
    assert modes["a/b/f.txt"] == modes["t.parquet"] == modes["new/ds/part-00000.parquet"] == 0o644
    assert store.root.is_dir()


def test_a_stricter_umask_is_honoured(tmp_path: Path, umask) -> None:
    with umask(0o077):
        tracefmt.write_atomic(tmp_path / "d" / "f.txt", "private")
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "d" / "f.txt").stat().st_mode) == 0o600


def test_a_replaced_file_keeps_its_owners_mode(tmp_path: Path) -> None:
    out = tmp_path / "secret.txt"
    out.write_text("old")
    out.chmod(0o600)
    tracefmt.write_atomic(out, "new")
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_an_interruption_as_the_temporary_is_made_leaves_none(tmp_path: Path, monkeypatch) -> None:
    """Ctrl-C arriving the instant the temporary takes its name: the writer's clean-up
    still knows it and removes it (a loaded machine left '.t.parquet.XXXX.partial'
    beside 'interrupted; partial outputs were removed')."""
    import signal

    real_rename = os.rename

    def rename_then_interrupt(src, dst):  # the signal lands right after the rename
        real_rename(src, dst)
        if str(dst).endswith(".partial"):
            signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(os, "rename", rename_then_interrupt)
    out = OutputFile(tmp_path / "t.parquet")

    def write() -> None:  # as every writer does: on any error, discard
        try:
            out.open()
        except BaseException:
            out.discard()
            raise

    with pytest.raises(KeyboardInterrupt):
        write()
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
