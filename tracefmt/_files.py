"""Checks shared by every reader of an input file and every writer of outputs."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop on Python < 3.13
        return Path(path).absolute()


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The (device, inode) pair naming the file ``path`` leads to, None if there is none.

    Two names share it when they are the same file: a hard link, a bind mount, a
    ``/proc/self/fd`` entry; resolved paths tell none of these apart.
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _enclosing(path: Path, directories: dict[tuple[int, int], str]) -> str | None:
    """The first of ``directories`` (by identity) that holds ``path``, at any depth."""
    for parent in _real(path).parents:
        ident = _identity(parent)
        if ident in directories:
            return directories[ident]
    return None


def _is_temporary_of(path: str | os.PathLike[str], target: Path) -> bool:
    real = _real(path)
    return real.parent == target.parent and _temporary_names(target).fullmatch(real.name) is not None


def distinct_outputs(
    inputs: Sequence[str | os.PathLike[str] | None],
    outputs: Sequence[str | os.PathLike[str] | None],
    *,
    what: str = "the input",
) -> None:
    """Raise ``ParameterError`` when an output would destroy an input or another output.

    An output is refused when it is one of the inputs (compared as files, by device and
    inode, so a hard link, a bind mount or ``/proc/self/fd/N`` is caught, and by
    resolved path), when it lies inside an input directory (a dataset of Parquet parts,
    a store's results), when an input lies inside it (a dataset written over the
    directory it is read from), or when two outputs are the same file. ``what`` names
    the input in the message; ``None`` entries (options not given) are skipped. Call it
    with the outputs as they will be written, defaults filled in.

    Examples
    --------
    >>> distinct_outputs(["t.parquet"], ["paths.json", "inst.parquet"])
    >>> distinct_outputs(["t.parquet"], ["./t.parquet"])
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: ./t.parquet: output would overwrite the input; choose another name
    """
    given = [p for p in inputs if p is not None]
    files = {_identity(p) for p in given} - {None}
    names = {_real(p) for p in given}
    folders = {ident: str(p) for p in given if is_directory(p) and (ident := _identity(p)) is not None}
    seen: set[Path | tuple[int, int]] = set()
    for out in outputs:
        if out is None:
            continue
        target, ident = _real(out), _identity(out)
        if target in names or (ident is not None and ident in files):
            raise ParameterError(f"{out}: output would overwrite {what}; choose another name")
        if any(_is_temporary_of(p, target) for p in given):
            # A sweep would take it for a killed run's temporary file.
            raise ParameterError(
                f"{out}: output would overwrite {what} (named like its temporary file); choose another name"
            )
        holder = _enclosing(Path(out), folders)
        if holder is not None:
            raise ParameterError(
                f"{out}: output would be written into {what} {holder} (a directory read as "
                "input); choose a place outside it"
            )
        if ident is not None and is_directory(out):
            inside = next((str(p) for p in given if _enclosing(Path(p), {ident: str(out)})), None)
            if inside is not None:
                raise ParameterError(
                    f"{out}: output would replace the directory holding {what} {inside}; choose another name"
                )
        if target in seen or (ident is not None and ident in seen):
            raise ParameterError(f"{out}: given for two outputs; choose another name for one")
        seen.add(target)
        if ident is not None:
            seen.add(ident)


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


#: Longest file name most file systems take.
_NAME_MAX = 255
#: What a temporary name adds to the output's: a dot before, a dot, eight random
#: characters (``tempfile``) and ``.partial`` after.
_TEMP_EXTRA = len("..12345678.partial")


def _umask() -> int:
    """The process's umask, read without changing it where the system says it."""
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text(encoding="ascii")
        return int(next(ln for ln in status.splitlines() if ln.startswith("Umask:")).split()[1], 8)
    old = os.umask(0o022)  # pragma: no cover - systems without /proc
    os.umask(old)
    return old


def output_mode(*, directory: bool = False) -> int:
    """The permission bits of a file (0644) or directory (0755) wirepath creates.

    A permissive umask (000) grants no more: outputs are never writable by others. A
    stricter one (077) is honoured, since it keeps files private.

    >>> oct(output_mode()) in ("0o644", "0o640", "0o600"), oct(output_mode(directory=True))[:4]
    (True, '0o75')
    """
    return (0o755 if directory else 0o644) & ~_umask()


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Create the directory ``path`` and its missing parents, each with ``output_mode``;
    directories already there are left as they are.

    >>> import tempfile, pathlib, stat
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "a" / "b"
    >>> make_dirs(d)
    >>> oct(stat.S_IMODE(d.parent.stat().st_mode)) == oct(output_mode(directory=True))
    True
    """
    missing = []
    p = Path(path)
    while not p.is_dir() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            # mkdir takes the umask away from the mode asked: 0755 or less, never more.
            os.mkdir(d, 0o755)
        except FileExistsError:
            if not d.is_dir():
                raise


def _open_locked(path: str | os.PathLike[str]) -> int | None:
    """A descriptor holding an exclusive lock on ``path``, None if another holds one (or
    it cannot be opened). The kernel drops the lock when its holder dies, however."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _temporary_names(target: Path) -> re.Pattern[str]:
    """The names of ``target``'s temporaries (``_temporary``) and of a directory it
    replaces (``OutputFile.commit``), as a sweep looks for them."""
    return re.compile(re.escape(f".{target.name}.") + r"[a-z0-9_]{8}\.(partial|replaced)")


def _sweep(target: Path) -> None:
    """Remove the temporaries of ``target`` that no living writer holds: what a run
    killed with SIGKILL left behind. A writer locks its temporary for as long as it
    writes, so one that is only slow keeps its file."""
    _sweep_matching(target.parent, _temporary_names(target))


def sweep_temporaries(directory: str | os.PathLike[str]) -> None:
    """Remove every temporary in ``directory`` that no living writer holds, whatever
    output it was for: for a directory of outputs each named anew (a store's results),
    where no later writer has the killed one's name to find its leftovers by.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / ".r-0001.parquet.k1ll3d_1.partial").write_bytes(b"PAR1")
    >>> sweep_temporaries(d)
    >>> list(d.iterdir())
    []
    """
    _sweep_matching(Path(directory), re.compile(r"\..+\.[a-z0-9_]{8}\.(partial|replaced)"))


def _sweep_matching(directory: Path, pattern: re.Pattern[str]) -> None:
    try:
        with os.scandir(directory) as entries:
            stale = [e.path for e in entries if pattern.fullmatch(e.name)]
    except OSError:
        return
    for path in stale:
        fd = _open_locked(path)
        if fd is None:
            continue
        try:
            remove_quietly(path)
        finally:
            os.close(fd)


def _temporary(target: Path, *, directory: bool) -> tuple[Path, int]:
    """A new temporary beside ``target`` (a file, or a directory), unique to this writer
    so that concurrent writers never share one, and locked (``_sweep``); its path and
    the descriptor holding the lock."""
    prefix = f".{target.name}."
    if directory:
        made = tempfile.mkdtemp(prefix=prefix, suffix=".new", dir=target.parent)
        fd = os.open(made, os.O_RDONLY | os.O_DIRECTORY)
    else:
        fd, made = tempfile.mkstemp(prefix=prefix, suffix=".new", dir=target.parent)
    tmp = Path(made.removesuffix(".new") + ".partial")
    try:
        # Locked before it takes the name a sweep looks for: no sweep can take it for stale.
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(made, tmp)
    except BaseException:
        os.close(fd)
        remove_quietly(made)
        remove_quietly(tmp)  # interrupted just after the rename
        raise
    return tmp, fd


@contextmanager
def _signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends (in the main thread, where Python
    runs their handlers): a temporary is made and recorded whole, or not at all, so the
    clean-up an interruption starts knows every temporary there is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISDIR, "directory"),
    ):
        if test(mode):
            return name
    return "special file"  # pragma: no cover - every kind a system has is named above


def _destination(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where an output given as ``path`` goes, and whether it is written directly.

    A regular file is replaced by rename; through a symbolic link, the file it names is
    (the link stays). A character device or a FIFO (``/dev/null``, ``/dev/stdout`` on a
    terminal or pipe) is written into, never replaced. Anything else is refused.
    """
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ENAMETOOLONG):
            # Nothing there (or a dangling link, which the output replaces); a parent
            # that is a file, or too long a name, is said by the parent's checks.
            return p, False
        raise TraceFileError(f"{p}: cannot write it ({exc.strerror or exc})") from None
    if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
        if not os.access(p, os.W_OK):
            raise TraceFileError(f"{p}: cannot write it (permission denied)")
        return p, True
    if stat.S_ISREG(st.st_mode):
        return (_real(p), False) if p.is_symlink() else (p, False)
    if stat.S_ISDIR(st.st_mode):
        raise TraceFileError(f"{p}: is a directory (give a file name inside it)")
    raise TraceFileError(f"{p}: is a {_kind(st.st_mode)}, not a file (give a file name)")


def writable_output(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path if an output can be written there, else one clear error: no
    name, a directory, a device that is not a character device, a name too long for the
    file system, a parent that is a file or cannot be written in.

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
    OutputFile(path)
    return Path(path)


def _check_parent(p: Path) -> None:
    """Raise unless a temporary for ``p`` can be made beside it."""
    if len(p.name.encode()) + _TEMP_EXTRA > _NAME_MAX:
        raise ParameterError(
            f"{p.name[:40]}...: file name too long (at most {_NAME_MAX - _TEMP_EXTRA} bytes)"
        )
    parent = next((q for q in (p.parent, *p.parent.parents) if q.exists()), Path("."))
    if not parent.is_dir():
        raise TraceFileError(f"{parent}: is a file, not a directory to write {p.name} in")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceFileError(f"{parent}: cannot write in it (permission denied)")


class OutputFile:
    """One output on its way to its place: written to a temporary of its own beside the
    target, then renamed over it whole, so readers see the old file or the new one,
    never half of one, and of two writers at once the last to finish wins whole.

    The checks of ``writable_output`` run on creation; ``open`` creates the missing
    parent directories and the temporary, ``commit`` gives it ``output_mode`` (or the
    mode of the file it replaces, less write for others) and renames it, ``discard``
    removes it. A character device or a FIFO is written into directly (``path`` is
    then the file to write, and nothing is renamed or removed); a symbolic link is
    written through, not replaced.

    Parameters
    ----------
    path : str or path-like
        The output as the user named it (error messages say it so).
    directory : bool
        The output is a directory (a dataset of parts), made whole the same way.
    exclusive : bool
        Never replace: ``commit`` raises ``FileExistsError`` if something took the
        name meanwhile (a new file in a directory others add to, such as a store's).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.txt"
    >>> out = OutputFile(target)
    >>> _ = out.open().write_text("whole")
    >>> out.commit()
    >>> target.read_text(), [p.name for p in target.parent.iterdir()]
    ('whole', ['a.txt'])
    """

    def __init__(
        self, path: str | os.PathLike[str], *, directory: bool = False, exclusive: bool = False
    ) -> None:
        if not str(path):
            raise ParameterError(f"no output {'directory' if directory else 'file'} named (give a name)")
        self.path = Path(path)
        self.directory = directory
        self.exclusive = exclusive
        if directory:  # what may be replaced is the caller's to check (a dataset only)
            self.target = _real(self.path) if self.path.is_symlink() else self.path
            self.direct = False
        else:
            self.target, self.direct = _destination(self.path)
        if not self.direct:
            _check_parent(self.target)
        self.tmp: Path | None = None
        self._lock: int | None = None

    def open(self) -> Path:
        """The file (or directory) to write; made on the first call."""
        if self.tmp is None:
            if self.direct:
                self.tmp = self.target
            else:
                with write_errors(self.path):
                    make_dirs(self.target.parent)
                    _sweep(self.target)
                    with _signals_held():
                        self.tmp, self._lock = _temporary(self.target, directory=self.directory)
        return self.tmp

    def _mode(self) -> int:
        try:
            st = os.stat(self.target)
        except OSError:
            return output_mode(directory=self.directory)
        if stat.S_ISREG(st.st_mode) and not self.directory:
            return stat.S_IMODE(st.st_mode) & 0o755  # a file's owner chose its mode; others never write
        return output_mode(directory=self.directory)

    def commit(self) -> None:
        """Put the finished output in its place (nothing to do when written directly).
        A directory already at the target is replaced, and stays if that fails."""
        tmp = self.open()
        if self.direct:
            return
        with write_errors(self.path):
            os.chmod(tmp, self._mode())
            if self.exclusive and not self.directory:
                os.link(tmp, self.target)  # fails if the name is taken, unlike a rename
                remove_quietly(tmp)
            elif self.directory and self.target.is_dir():
                self._replace_directory(tmp)
            else:
                os.replace(tmp, self.target)
        self._unlock()

    def _replace_directory(self, tmp: Path) -> None:
        # Two renames (no system call swaps two directories portably): readers see the
        # old directory, then none for an instant, then the new one. The old one is
        # locked while it waits to be removed, so a sweep takes it only once its
        # remover is dead.
        old = tmp.with_name(tmp.name.removesuffix(".partial") + ".replaced")
        lock = _open_locked(self.target)
        try:
            os.replace(self.target, old)
            try:
                os.replace(tmp, self.target)
            except BaseException:
                os.replace(old, self.target)
                raise
            remove_quietly(old)
        finally:
            if lock is not None:
                os.close(lock)

    def discard(self) -> None:
        """Remove the temporary, if any; what was at the target stays. Never raises."""
        if self.tmp is not None and not self.direct:
            remove_quietly(self.tmp)
        self._unlock()

    def _unlock(self) -> None:
        lock, self._lock = self._lock, None
        if lock is not None:
            with contextlib.suppress(OSError):
                os.close(lock)


class SequentialFile(io.RawIOBase):
    """A file written front to back that counts its own position.

    Parquet writers ask where they are, which a FIFO or a terminal cannot say; given
    this instead of a path, they write into one (``OutputFile.direct``).

    >>> import io
    >>> f = SequentialFile("/dev/null")
    >>> f.write(b"abc"), f.tell()
    (3, 3)
    >>> f.close()
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._f = open(path, "wb", buffering=0)  # noqa: SIM115 - closed by close()
        self._pos = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:  # type: ignore[override]
        n = self._f.write(data) or 0
        self._pos += n
        return n

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._f.close()
        super().close()


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
    ``write_error(exc, path)``: one line naming the output (a full disk said as such);
    ``FileExistsError`` (an exclusive ``OutputFile`` beaten to its name) passes."""
    try:
        yield
    except (WirepathError, FileExistsError):
        raise
    except OSError as exc:
        raise write_error(exc, path) from None


def remove_quietly(path: str | os.PathLike[str]) -> None:
    """Remove a temporary file or directory if it is there; never raises (it runs while
    handling errors). A link is removed, never what it points to."""
    p = Path(path)
    with contextlib.suppress(OSError):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)


@contextmanager
def atomic_output(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield the file to write ``path`` through (an ``OutputFile``'s temporary); when the
    block ends without error it replaces ``path`` in one rename, so no reader ever sees
    half a file. On any error, Ctrl-C or SIGTERM the temporary file is removed and what
    was at ``path`` stays; an ``OSError`` (a full disk, say) becomes one
    ``TraceFileError`` naming ``path``. Parent directories are created. A character
    device or FIFO (``/dev/null``) is yielded itself, to be written into.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "a.bin"
    >>> with atomic_output(target) as tmp:
    ...     _ = tmp.write_bytes(b"whole")
    >>> target.read_bytes(), [p.name for p in target.parent.iterdir()]
    (b'whole', ['a.bin'])
    """
    out = OutputFile(path)
    try:
        with write_errors(path):
            yield out.open()
            out.commit()
    except BaseException:
        out.discard()
        raise


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` to ``path`` through ``atomic_output``: a temporary file of its own
    and a rename, so an interrupted run never leaves half a file behind; parent
    directories are created; the temporary file is removed if writing fails.

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
