"""Checks shared by every reader of an input file and every writer of outputs."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tracefmt.errors import ParameterError, TraceFileError, WirepathError


def existing_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` as a Path if it is a regular file, else a ``TraceFileError`` saying why.

    ``what`` names the expected content, e.g. "a Parquet trace file".
    """
    p = Path(path)
    if not p.exists():
        raise TraceFileError(f"{p}: no such file")
    if p.is_dir():
        raise TraceFileError(f"{p}: is a directory (expected {what})")
    return p


def _real(path: str | os.PathLike[str]) -> Path:
    """The path with links resolved; as given (absolute) when it cannot be (a name the
    file system refuses), which the writer then reports."""
    try:
        return Path(path).resolve()
    except OSError:
        return Path(path).absolute()


def partial_path(target: str | os.PathLike[str]) -> Path:
    """The temporary file an output is written to before it replaces ``target`` whole.

    >>> partial_path("out/t.parquet").as_posix()
    'out/.t.parquet.partial'
    """
    p = Path(target)
    return p.with_name(f".{p.name}.partial")


def distinct_outputs(
    inputs: Sequence[str | os.PathLike[str] | None],
    outputs: Sequence[str | os.PathLike[str] | None],
    *,
    what: str = "the input",
) -> None:
    """Raise ``ParameterError`` when an output, or the temporary file it is first written
    to (``partial_path``), is one of the inputs (it would destroy it; the message names
    the input as ``what``), or two outputs are the same file (one would replace the
    other). Paths are compared after resolving links. ``None`` entries (options not
    given) are skipped.

    Examples
    --------
    >>> distinct_outputs(["t.parquet"], ["paths.json", "inst.parquet"])
    >>> distinct_outputs(["t.parquet"], ["./t.parquet"])
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: ./t.parquet: output would overwrite the input; choose another name
    """
    sources = {_real(p) for p in inputs if p is not None}
    seen: set[Path] = set()
    for out in outputs:
        if out is None:
            continue
        target = _real(out)
        if target in sources or partial_path(target) in sources:
            raise ParameterError(f"{out}: output would overwrite {what}; choose another name")
        if target in seen:
            raise ParameterError(f"{out}: given for two outputs; choose another name for one")
        seen.add(target)


def parquet_output(path: str | os.PathLike[str]) -> None:
    """Raise ``ParameterError`` unless ``path`` names a Parquet trace (a verb that writes
    Parquet must not write it under a text trace's name).

    Examples
    --------
    >>> parquet_output("t.parquet")
    >>> parquet_output("t.txt")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: t.txt: this writes a Parquet trace: name it .parquet or .pq (...)
    """
    name = Path(path).name.lower()
    if not name.endswith((".parquet", ".pq")):
        raise ParameterError(
            f"{path}: this writes a Parquet trace: name it .parquet or .pq "
            "(wirepath convert makes text of it)"
        )


#: Longest file name most file systems take (the temporary name adds ".partial" and a dot).
_NAME_MAX = 255


def writable_output(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path if an output can be written there, else one clear error: no
    name, a directory, a name too long for the file system, a parent that is a file or
    cannot be written in.

    Examples
    --------
    >>> writable_output("out/t.parquet").name
    't.parquet'
    >>> writable_output("")
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: no output file named (give a file name)
    """
    if not str(path):
        raise ParameterError("no output file named (give a file name)")
    p = Path(path)
    if len(p.name.encode()) + len(".partial") + 1 > _NAME_MAX:
        raise ParameterError(f"{p.name[:40]}...: file name too long (at most {_NAME_MAX - 9} bytes)")
    if p.is_dir():
        raise TraceFileError(f"{p}: is a directory (give a file name inside it)")
    parent = next((q for q in (p.parent, *p.parent.parents) if q.exists()), Path("."))
    if not parent.is_dir():
        raise TraceFileError(f"{parent}: is a file, not a directory to write {p.name} in")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceFileError(f"{parent}: cannot write in it (permission denied)")
    return p


def publish(tmp: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """Put a finished temporary file in its place, in one rename, writable by no one but
    its owner's group at most (a permissive umask must not leave outputs world-writable).

    Examples
    --------
    >>> import tempfile, pathlib, stat
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / ".a.partial").write_text("x")
    1
    >>> publish(d / ".a.partial", d / "a")
    >>> bool(stat.S_IMODE((d / "a").stat().st_mode) & 0o002)
    False
    """
    mode = os.stat(tmp).st_mode & 0o7777
    if mode & 0o002:
        os.chmod(tmp, mode & ~0o002)
    os.replace(tmp, target)


#: errno values saying the file system has no room for what is written.
DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def write_error(exc: OSError, path: str | os.PathLike[str]) -> TraceFileError:
    """The one-line error for a failed write of ``path``; a full disk is said as such.

    Examples
    --------
    >>> import errno
    >>> write_error(OSError(errno.ENOSPC, "Error writing bytes to file"), "out/t.parquet")
    TraceFileError('cannot write out/t.parquet: no space left on the device (the disk is full)')
    >>> write_error(OSError(errno.EIO, "Input/output error"), "t.json")
    TraceFileError('cannot write t.json: Input/output error')
    """
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        reason = "no space left on the device (the disk is full)"
    elif exc.errno == errno.EFBIG:
        reason = "file too large for the file system"
    else:
        reason = exc.strerror or str(exc) or type(exc).__name__
    return TraceFileError(f"cannot write {path}: {reason}")


@contextmanager
def write_errors(path: str | os.PathLike[str]) -> Iterator[None]:
    """Inside the block, an ``OSError`` that is not already a wirepath error becomes
    ``write_error(exc, path)``: one line naming the output (a full disk said as such)."""
    try:
        yield
    except WirepathError:
        raise
    except OSError as exc:
        raise write_error(exc, path) from None


def remove_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a temporary file if it is there; never raises (it runs while handling errors)."""
    with contextlib.suppress(OSError):
        Path(path).unlink(missing_ok=True)


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield the temporary file (``partial_path``) to write ``path`` through; when the
    block ends without error it replaces ``path`` in one rename (``publish``), so no
    reader ever sees half a file. On any error, Ctrl-C or SIGTERM the temporary file is
    removed and what was at ``path`` stays; an ``OSError`` (a full disk, say) becomes
    one ``TraceFileError`` naming ``path``. Parent directories are created.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.bin"
    >>> with atomic_output(target) as tmp:
    ...     _ = tmp.write_bytes(b"whole")
    >>> target.read_bytes(), [p.name for p in target.parent.iterdir()]
    (b'whole', ['a.bin'])
    """
    target = writable_output(path)
    tmp = partial_path(target)
    try:
        with write_errors(target):
            target.parent.mkdir(parents=True, exist_ok=True)
            yield tmp
            publish(tmp, target)
    except BaseException:
        remove_quietly(tmp)
        raise


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file (``partial_path``) and a
    rename, so an interrupted run never leaves half a file behind; parent directories
    are created; the temporary file is removed if writing fails (``atomic_output``).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = write_atomic(pathlib.Path(tempfile.mkdtemp()) / "sub" / "a.json", "{}")
    >>> p.read_text(), sorted(x.name for x in p.parent.iterdir())
    ('{}', ['a.json'])
    """
    with atomic_output(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return Path(path)


def is_directory(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory; a name the system cannot even look up (too
    long, say) is not one, and whoever opens or writes it says what is wrong with it.

    >>> is_directory("."), is_directory("x" * 300)
    (True, False)
    """
    try:
        return Path(path).is_dir()
    except OSError:
        return False
