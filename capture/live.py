"""The live capture agent: record an interface into rotating pcap files, then into a trace.

Packets are recorded by ``tcpdump`` running as a child process (libpcap on an AF_PACKET
TPACKET_V3 ring): ``benchmarks/live.py`` measured it against scapy's sniffer, which drops
packets at a small fraction of the rate tcpdump sustains (numbers in BENCHMARKS.md).

- Files: ``DIR/capture-<start>.pcap``, then ``...pcap1``, ``...pcap2`` when
  ``rotate_mb`` is given (tcpdump ``-C``). tcpdump writes each packet out whole as it
  arrives (``-U``), so every file on disk holds whole records at every moment and can be
  copied or read while the capture runs.
- Converting: while tcpdump records, a thread (at a lower CPU priority than tcpdump)
  reads each file as it grows and, once a later rotation exists, goes on with the next,
  through one :class:`~capture.convert.StreamConverter`: open TCP connections carry over
  from file to file, and messages that are final (no open connection can still produce
  an older one) are written every couple of seconds as ``DIR/trace/part-NNNNN.parquet``
  (each part published whole, in time order: a dataset that pyarrow, DuckDB or pandas
  open at any moment) and into ``DIR/trace.parquet``, published at the end. Memory holds
  the open connections, not the recording.
- Stopping: after ``duration_s``, when ``stop`` is set (the CLI sets it on SIGINT and
  SIGTERM), or when tcpdump exits. The agent first lets libpcap's ring block timer (1 s)
  hand over what the kernel holds, then stops tcpdump with SIGINT, so it writes what it
  has and reports what it received and what the kernel dropped; the conversion reads the
  last bytes, closes the connections still open and publishes the trace. The counters go
  into the trace's provenance (``live``) and ``DIR/live.json``.
- Privileges: capturing needs root or CAP_NET_RAW; without them one
  :class:`~tracefmt.MissingToolError` says so.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from capture import DEFAULT_BUFFER_MB, DEFAULT_SNAPLEN
from tracefmt import (
    MissingToolError,
    OutputFile,
    ParameterError,
    TraceFileError,
    WirepathError,
    make_dirs,
    remove_quietly,
    write_atomic,
    write_errors,
)

__all__ = [
    "DEFAULT_BUFFER_MB",
    "DEFAULT_SNAPLEN",
    "LiveCapture",
    "LiveReport",
    "LiveStats",
    "Recording",
    "capture_files",
    "capture_live",
    "glob_escape",
    "may_capture",
    "parse_tcpdump_stats",
    "tcpdump_command",
]

PathLike = str | os.PathLike[str]

_BLOCK_TIMEOUT_S = 1.25  # libpcap's packet-buffer timeout (1 s, tcpdump's) and a margin
_PRIVILEGE_HINT = (
    "live capture needs root or CAP_NET_RAW: run it with sudo, or grant the capability to "
    "tcpdump once (sudo setcap cap_net_raw,cap_net_admin=eip $(command -v tcpdump))"
)
_STATS = {
    "captured": re.compile(r"(\d+) packets? captured"),
    "received": re.compile(r"(\d+) packets? received by filter"),
    "dropped_kernel": re.compile(r"(\d+) packets? dropped by kernel"),
    "dropped_interface": re.compile(r"(\d+) packets? dropped by interface"),
}


@dataclass(frozen=True)
class LiveStats:
    """What tcpdump reports when it stops.

    Attributes
    ----------
    captured : int
        Packets written to the files.
    received : int or None
        Packets that passed the filter (``received by filter``). On loopback the kernel
        hands each packet over twice (leaving and arriving) and libpcap keeps one copy, so
        this is twice ``captured`` there.
    dropped_kernel : int or None
        Packets the kernel dropped because the capture buffer was full.
    dropped_interface : int or None
        Packets the interface dropped, where the driver reports it.
    """

    captured: int = 0
    received: int | None = None
    dropped_kernel: int | None = None
    dropped_interface: int | None = None

    def to_json(self) -> dict[str, int | None]:
        """The counters as a JSON-ready dict."""
        return {
            "captured": self.captured,
            "received": self.received,
            "dropped_kernel": self.dropped_kernel,
            "dropped_interface": self.dropped_interface,
        }


@dataclass(frozen=True)
class LiveReport:
    """What :func:`capture_live` recorded.

    Attributes
    ----------
    iface : str
        The interface.
    files : list of str
        The pcap files of this run, in order.
    stats : LiveStats
        tcpdump's counters (packets captured, received, dropped by the kernel).
    started, duration_s : str, float
        Start instant (ISO-8601, UTC) and seconds recorded.
    stopped_by : str
        ``duration``, ``signal`` (stop requested: Ctrl-C, SIGTERM), ``tcpdump`` (it exited)
        or ``converter`` (the conversion failed: its error is raised once the files are
        kept).
    trace : str or None
        The trace written (``DIR/trace.parquet``), or None when conversion was off.
    parts : str or None
        The same messages as a dataset of parts written while recording (``DIR/trace/``).
    conversion : dict or None
        The converter's report (messages, capture statistics), as JSON.
    recorder_error : str or None
        What tcpdump said when it stopped on its own (the interface went away, the disk
        filled up); the files up to that moment are kept and converted.
    """

    iface: str
    files: list[str]
    stats: LiveStats
    started: str
    duration_s: float
    stopped_by: str
    trace: str | None = None
    parts: str | None = None
    conversion: dict[str, Any] | None = field(default=None)
    recorder_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON-ready dict."""
        return {
            "iface": self.iface,
            "files": self.files,
            "packets": self.stats.to_json(),
            "started": self.started,
            "duration_s": round(self.duration_s, 6),
            "stopped_by": self.stopped_by,
            "trace": self.trace,
            "parts": self.parts,
            "conversion": self.conversion,
            "recorder_error": self.recorder_error,
        }


@dataclass(frozen=True)
class Recording:
    """How to record: what tcpdump is asked for (checked on creation).

    Attributes
    ----------
    bpf : str, optional
        Capture filter (pcap-filter syntax), e.g. ``tcp port 8080``.
    rotate_mb : int, optional
        Start a new file once the current one exceeds this many million bytes.
    snaplen : int
        Bytes kept of each packet.
    buffer_mb : int
        Kernel capture buffer in MiB; a bigger one rides out longer bursts.
    promisc : bool
        Put the interface in promiscuous mode (needed on a mirrored switch port).
    immediate : bool
        Hand each packet to tcpdump as it arrives (``--immediate-mode``) instead of a ring
        block at a time: files lag the wire by nothing, at a higher CPU cost per packet
        and far fewer packets buffered (BENCHMARKS.md).

    Examples
    --------
    >>> Recording(rotate_mb=0)
    Traceback (most recent call last):
    ...
    tracefmt.errors.ParameterError: --rotate-mb 0 must be at least 1 (million bytes per file)
    """

    bpf: str | None = None
    rotate_mb: int | None = None
    snaplen: int = DEFAULT_SNAPLEN
    buffer_mb: int = DEFAULT_BUFFER_MB
    promisc: bool = True
    immediate: bool = False

    def __post_init__(self) -> None:
        if self.snaplen < 64 or self.snaplen > DEFAULT_SNAPLEN:
            raise ParameterError(f"--snaplen {self.snaplen} is out of range (64 to {DEFAULT_SNAPLEN} bytes)")
        if self.rotate_mb is not None and self.rotate_mb < 1:
            raise ParameterError(f"--rotate-mb {self.rotate_mb} must be at least 1 (million bytes per file)")
        if self.buffer_mb < 1:
            raise ParameterError(f"--buffer-mb {self.buffer_mb} must be at least 1 (MiB)")


def tcpdump_command(
    iface: str,
    pcap: PathLike,
    recording: Recording = Recording(),  # frozen: one shared default is safe
    *,
    tcpdump: str = "tcpdump",
    as_root: bool | None = None,
) -> list[str]:
    """The tcpdump command line that records ``iface`` into ``pcap`` (and its rotations).

    Parameters
    ----------
    iface : str
        Interface to record (``any`` for all).
    pcap : str or path-like
        First file; rotations append 1, 2, ... to its name.
    recording : Recording
        Filter, rotation, snap length, buffer, promiscuous and immediate mode.
    tcpdump : str
        The tcpdump binary.
    as_root : bool, optional
        Running as root (default: the current effective user id is 0). tcpdump then
        stays root (``-Z root``) instead of switching to its own user, which could not
        open the rotated files in a root-owned directory.

    Examples
    --------
    >>> rec = Recording(bpf="tcp", rotate_mb=100)
    >>> " ".join(tcpdump_command("eth1", "/cap/c.pcap", rec, as_root=False))
    'tcpdump -i eth1 -n -U -s 262144 -B 32768 -w /cap/c.pcap -C 100 tcp'
    """
    r = recording
    cmd = [tcpdump, "-i", iface, "-n", "-U", "-s", str(r.snaplen), "-B", str(r.buffer_mb * 1024)]
    if not r.promisc:
        cmd.append("-p")
    if r.immediate:
        cmd.append("--immediate-mode")
    if as_root if as_root is not None else os.geteuid() == 0:
        cmd += ["-Z", "root"]
    cmd += ["-w", str(pcap)]
    if r.rotate_mb is not None:
        cmd += ["-C", str(r.rotate_mb)]
    if r.bpf:
        cmd.append(r.bpf)
    return cmd


def parse_tcpdump_stats(text: str) -> LiveStats:
    """tcpdump's closing counters from its standard error.

    Examples
    --------
    >>> parse_tcpdump_stats('''tcpdump: listening on eth0, link-type EN10MB (Ethernet)
    ... 1500 packets captured
    ... 1520 packets received by filter
    ... 20 packets dropped by kernel''')
    LiveStats(captured=1500, received=1520, dropped_kernel=20, dropped_interface=None)
    """
    found: dict[str, int] = {}
    for key, pattern in _STATS.items():
        matches = pattern.findall(text)
        if matches:
            found[key] = int(matches[-1])
    return LiveStats(
        captured=found.get("captured", 0),
        received=found.get("received"),
        dropped_kernel=found.get("dropped_kernel"),
        dropped_interface=found.get("dropped_interface"),
    )


def _rotation_index(path: Path, first: str) -> int:
    suffix = path.name[len(first) :]
    return int(suffix) if suffix else 0


def capture_files(first: PathLike) -> list[Path]:
    """The files of one recording, in order: ``first``, then its rotations ``first1``, ``first2``...

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("c.pcap", "c.pcap10", "c.pcap2", "c.pcap1", "other.pcap"):
    ...     _ = (d / name).write_bytes(b"")
    >>> [p.name for p in capture_files(d / "c.pcap")]
    ['c.pcap', 'c.pcap1', 'c.pcap2', 'c.pcap10']
    """
    first = Path(first)
    name = first.name
    files = [
        p
        for p in first.parent.glob(glob_escape(name) + "*")
        if p.name == name or (p.name[len(name) :].isdigit() and p.is_file())
    ]
    return sorted(files, key=lambda p: _rotation_index(p, name))


def glob_escape(text: str) -> str:
    """``text`` with glob wildcards escaped (for a file name used as a glob prefix)."""
    return re.sub(r"([*?\[])", r"[\1]", text)


def _interfaces() -> list[str]:
    try:
        return sorted(name for _, name in socket.if_nameindex())
    except OSError:
        return []


def may_capture(tcpdump: str = "tcpdump") -> bool:
    """Whether this process (or the tcpdump binary, through file capabilities) may capture.

    Examples
    --------
    >>> isinstance(may_capture(), bool)
    True
    """
    try:
        socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0).close()
        return True
    except PermissionError:
        pass
    except OSError:  # no AF_PACKET here: let tcpdump say what it can do
        return True
    binary = shutil.which(tcpdump) or tcpdump
    try:
        return bool(os.getxattr(binary, "security.capability"))
    except OSError:
        return False


def _sleep_unless_exits(proc: subprocess.Popen[bytes], seconds: float) -> None:
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(seconds)


def _die_with_parent() -> None:
    """In the child: get SIGINT if the agent dies, so tcpdump never outlives it."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


class LiveCapture:
    """A running tcpdump recording one interface into rotating pcap files.

    Use as a context manager or call :meth:`start` and :meth:`stop`::

        with LiveCapture("eth1", "cap/") as cap:
            time.sleep(10)
        cap.stats, cap.files()

    Parameters
    ----------
    iface : str
        Interface to record (a mirrored switch port, a bridge, a host interface, ``any``).
    out_dir : str or path-like
        Directory for the files (created).
    recording : Recording
        Filter, rotation, snap length, buffer, promiscuous and immediate mode.
    tcpdump : str, optional
        The tcpdump binary (default: found on PATH).
    """

    def __init__(
        self,
        iface: str,
        out_dir: PathLike,
        recording: Recording = Recording(),  # frozen: one shared default is safe
        *,
        tcpdump: str | None = None,
    ) -> None:
        binary = tcpdump or shutil.which("tcpdump")
        if binary is None:
            raise MissingToolError("tcpdump is needed for live capture: apt-get install tcpdump")
        if iface != "any" and (known := _interfaces()) and iface not in known:
            raise ParameterError(f"no interface {iface!r} here (interfaces: {', '.join([*known, 'any'])})")
        self.iface = iface
        self.out_dir = Path(out_dir)
        self.started = datetime.now(UTC)
        stamp = self.started.strftime("%Y%m%dT%H%M%S.%fZ")
        self.first_file = self.out_dir / f"capture-{stamp}.pcap"
        self.command = tcpdump_command(iface, self.first_file, recording, tcpdump=binary)
        self.recording = recording
        self.stats: LiveStats | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: list[str] = []
        self._ready = threading.Event()
        self._listening = False
        self._reader: threading.Thread | None = None
        self._t0 = 0.0
        self.duration_s = 0.0

    def __enter__(self) -> LiveCapture:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def files(self) -> list[Path]:
        """The pcap files written so far, in order."""
        return capture_files(self.first_file)

    @property
    def running(self) -> bool:
        """Whether tcpdump is still recording."""
        return self._proc is not None and self._proc.poll() is None

    def _read_stderr(self) -> None:
        stream = self._proc.stderr if self._proc is not None else None
        for raw in stream or ():
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._stderr.append(line)
            if "listening on" in line:
                self._listening = True
                self._ready.set()
        self._ready.set()

    def start(self, *, timeout_s: float = 10.0) -> None:
        """Start tcpdump and return once it is recording (its ``listening on`` line).

        Raises
        ------
        MissingToolError
            No permission to capture (not root, no CAP_NET_RAW).
        ParameterError
            tcpdump refused the interface or the filter (its message is quoted).
        TraceFileError
            The directory cannot be written.
        """
        if not may_capture(self.command[0]):
            raise MissingToolError(_PRIVILEGE_HINT)
        try:
            make_dirs(self.out_dir)
        except OSError as exc:
            raise TraceFileError(
                f"{self.out_dir}: cannot create the capture directory ({exc.strerror})"
            ) from None
        if not os.access(self.out_dir, os.W_OK | os.X_OK):
            raise TraceFileError(f"{self.out_dir}: the capture directory is not writable")
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches the agent, which stops tcpdump cleanly
            preexec_fn=_die_with_parent,  # only sets the parent-death signal
        )
        self._t0 = time.monotonic()
        self._reader = threading.Thread(target=self._read_stderr, name="tcpdump-stderr", daemon=True)
        self._reader.start()
        self._ready.wait(timeout_s)
        # Not listening (tcpdump closed its stderr or took too long) is a failure even if
        # the process is not reaped yet.
        if not self._listening or self._proc.poll() is not None:
            self._fail()

    def error_message(self) -> str:
        """What tcpdump said on standard error, its closing counters left out."""
        said = [
            ln.removeprefix("tcpdump: ")
            for ln in self._stderr
            if ln.strip() and "listening on" not in ln and not any(p.search(ln) for p in _STATS.values())
        ]
        return "; ".join(said) or "no message"

    def _fail(self) -> None:
        """tcpdump ended (or never got ready): one clear error from what it said."""
        proc = self._proc
        self.stop()
        text = self.error_message()
        low = text.lower()
        if "permission" in low or "not permitted" in low:
            raise MissingToolError(_PRIVILEGE_HINT)
        if "no such device" in low or "doesn't exist" in low:
            raise ParameterError(f"no interface {self.iface!r} (tcpdump: {text})")
        bpf = self.recording.bpf
        if (bpf and not self._listening) or "syntax error" in low:
            # tcpdump compiles the filter before it starts listening: failing then, it was the filter.
            raise ParameterError(f"--filter {bpf!r} is not a valid capture filter (tcpdump: {text})")
        code = proc.returncode if proc is not None else None
        raise WirepathError(f"tcpdump stopped (exit status {code}): {text}")

    def stop(self, *, timeout_s: float = 10.0) -> LiveStats:
        """Stop tcpdump (SIGINT: it writes what it holds), wait, and return its counters."""
        proc = self._proc
        if proc is None:
            return LiveStats()
        if proc.poll() is None and not self.recording.immediate:
            # libpcap hands packets over a ring block at a time; a block that is not full goes
            # out when its timer (libpcap's 1 s timeout) expires. Stopping before that would
            # lose the packets in it, so let it expire first.
            _sleep_unless_exits(proc, _BLOCK_TIMEOUT_S)
        if proc.poll() is None:
            for sig, wait in ((signal.SIGINT, timeout_s), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(sig)
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.duration_s == 0.0:
            self.duration_s = time.monotonic() - self._t0
        if self._reader is not None:
            self._reader.join(5.0)
        if proc.stderr is not None:
            proc.stderr.close()
        self.stats = parse_tcpdump_stats("\n".join(self._stderr))
        return self.stats

    def written(self) -> tuple[int, int]:
        """Files and bytes on disk so far."""
        sizes = []
        for p in self.files():
            with contextlib.suppress(OSError):
                sizes.append(p.stat().st_size)
        return len(sizes), sum(sizes)

    def wait(
        self,
        *,
        duration_s: float | None = None,
        stop: threading.Event | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        progress_every_s: float = 1.0,
        halt: threading.Event | None = None,
    ) -> str:
        """Record until ``duration_s`` passes, ``stop`` is set, tcpdump exits or ``halt``
        is set (the conversion failed); says which.

        ``on_progress(files, bytes)`` is called about every ``progress_every_s`` seconds.
        """
        deadline = None if duration_s is None else self._t0 + duration_s
        next_report = time.monotonic() + progress_every_s
        while True:
            if stop is not None and stop.is_set():
                return "signal"
            if halt is not None and halt.is_set():
                return "converter"
            if not self.running:
                return "tcpdump"
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return "duration"
            if on_progress is not None and now >= next_report:
                on_progress(*self.written())
                next_report = now + progress_every_s
            step = 0.1 if deadline is None else min(0.1, deadline - now)
            if stop is not None:
                stop.wait(step)
            else:
                time.sleep(step)


def capture_live(
    iface: str,
    out_dir: PathLike,
    recording: Recording = Recording(),  # frozen: one shared default is safe
    *,
    duration_s: float | None = None,
    names: Mapping[str, str] | PathLike | None = None,
    convert: bool = True,
    stop: threading.Event | None = None,
    on_ready: Callable[[LiveCapture], None] | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    on_recorded: Callable[[LiveReport], None] | None = None,
    convert_options: Mapping[str, Any] | None = None,
) -> LiveReport:
    """Record ``iface`` into ``out_dir`` until stopped, converting the files into a trace as
    they are written.

    The conversion follows tcpdump: each file is read as it grows, rotation after
    rotation, by one :class:`capture.convert.StreamConverter` (so a connection that spans
    two files is one connection), in a thread of lower CPU priority than the recorder.
    Messages that are final go to ``out_dir/trace/part-NNNNN.parquet`` every couple of
    seconds (a dataset readable while the capture runs) and to ``out_dir/trace.parquet``,
    which is published once the recording has stopped and the last packets are converted.

    An earlier run's finished trace (``trace.parquet``, ``trace/``, ``live.json``) is
    moved into ``out_dir/previous/`` when this run starts converting, and removed only
    once this run's trace is published: a run that is killed or fails leaves it there.
    When writing fails (a full disk), the conversion is still tried, the partial files
    are removed and one error says what could not be written and which pcap files hold
    the recording.

    Parameters
    ----------
    iface : str
        Interface to record: a mirrored switch port, a bridge, a host interface, ``any``.
    out_dir : str or path-like
        Directory for the pcap files, ``trace.parquet`` and ``trace/``.
    recording : Recording
        Filter (e.g. ``tcp port 8080 or tcp port 5432``), rotation, snap length, buffer,
        promiscuous and immediate mode.
    duration_s : float, optional
        Stop after this many seconds (default: only when ``stop`` is set or tcpdump exits).
    names : mapping or path, optional
        Node names (address, address:port or CIDR -> name) for the trace, or a names file.
    convert : bool
        Convert the files into ``out_dir/trace.parquet`` (and ``out_dir/trace/``).
    stop : threading.Event, optional
        Set it (from a signal handler, another thread) to end the recording.
    on_ready : callable, optional
        Called with the :class:`LiveCapture` once tcpdump records.
    on_progress : callable, optional
        Called with the files and bytes written so far, about once a second.
    on_recorded : callable, optional
        Called with the report of the recording once tcpdump has stopped, before the
        conversion of the last packets.
    convert_options : mapping, optional
        More keyword arguments for the converter: ``node_by``, ``keep_payload``, ``keys``,
        ``point``, ``part_every_s``, ``chunk_bytes``.

    Returns
    -------
    LiveReport
        Also written to ``out_dir/live.json``, and (without ``trace`` and ``conversion``)
        into the trace's provenance under ``live``.

    Raises
    ------
    MissingToolError
        No tcpdump, or no permission to capture.
    ParameterError
        Unknown interface, bad filter or option.
    """
    # Long for its documented parameters only: the stages are the helpers below.
    options = _checked_options(duration_s, convert_options, names, convert=convert)
    cap = LiveCapture(iface, out_dir, recording)
    cap.start()
    following: _Following | None = None
    try:
        if convert:
            following = _Following(cap, names=names, options=options)
        if on_ready is not None:
            on_ready(cap)
        halt = following.failed if following is not None else None
        stopped_by = cap.wait(duration_s=duration_s, stop=stop, on_progress=on_progress, halt=halt)
    except BaseException:
        cap.stop()
        if following is not None:
            following.abort()
        raise
    recorded = _stop_recording(cap, stopped_by)
    # The recording's counters are on disk before the last of the conversion, which may fail.
    live_json = Path(out_dir, "live.json")
    try:
        write_atomic(live_json, json.dumps(recorded.to_json(), indent=1) + "\n")
    except TraceFileError as exc:
        if following is None:
            raise
        # The trace matters more than the counters, and may still fit: it is tried first.
        return _finish_conversion(following, recorded, live_json, on_recorded, failed=[str(exc)])
    if following is None:
        return recorded
    return _finish_conversion(following, recorded, live_json, on_recorded)


def _checked_options(
    duration_s: float | None,
    convert_options: Mapping[str, Any] | None,
    names: Mapping[str, str] | PathLike | None,
    *,
    convert: bool,
) -> dict[str, Any]:
    """The converter's options, checked with the rest of what :func:`capture_live` is given
    before anything is recorded."""
    if duration_s is not None and duration_s <= 0:
        raise ParameterError(f"--duration {duration_s} must be positive (seconds)")
    options = dict(convert_options or {})
    unknown = sorted(set(options) - _CONVERT_OPTIONS)
    if unknown:
        raise ParameterError(
            f"unknown conversion option {unknown[0]!r} (allowed: {', '.join(sorted(_CONVERT_OPTIONS))})"
        )
    if convert:
        # A bad names file must stop us now, not after an hour of recording.
        from capture.naming import Namer

        Namer(names, node_by=options.get("node_by", "address"))
    return options


def _stop_recording(cap: LiveCapture, stopped_by: str) -> LiveReport:
    """Stop tcpdump; the report of what it recorded (no conversion yet)."""
    stats = cap.stop()
    files = [str(p) for p in cap.files()]
    return LiveReport(
        iface=cap.iface,
        files=files,
        stats=stats,
        started=cap.started.isoformat().replace("+00:00", "Z"),
        duration_s=cap.duration_s,
        stopped_by=stopped_by,
        recorder_error=cap.error_message() if stopped_by == "tcpdump" else None,
    )


def _finish_conversion(
    following: _Following,
    recorded: LiveReport,
    live_json: Path,
    on_recorded: Callable[[LiveReport], None] | None,
    *,
    failed: Sequence[str] = (),
) -> LiveReport:
    """Convert the last packets of the stopped recording and publish the trace; the
    report with the conversion's, also written to ``live_json``. ``failed`` holds what
    could not be written before; any failure ends in one ``TraceFileError`` saying all
    that failed and where the recording is."""
    failures = list(failed)
    try:
        if on_recorded is not None:
            on_recorded(recorded)
        if not recorded.files:
            following.abort()
            _raise_failures(failures, recorded)
            return recorded
        # The counters (kernel drops above all) travel with the trace.
        live = {k: v for k, v in recorded.to_json().items() if k not in ("trace", "parts", "conversion")}
        conversion = following.finish(provenance={"live": live})
    except TraceFileError as exc:
        following.abort()
        _raise_failures([*failures, str(exc)], recorded)
        raise  # pragma: no cover - _raise_failures always raises when given a failure
    except BaseException:
        following.abort()
        raise
    report = replace(
        recorded, trace=str(following.trace), parts=str(following.parts_dir), conversion=conversion.to_json()
    )
    try:
        write_atomic(live_json, json.dumps(report.to_json(), indent=1) + "\n")
    except TraceFileError as exc:
        failures.append(str(exc))
    _raise_failures(failures, recorded, wrote=following.trace)
    following.drop_previous()
    return report


def _raise_failures(failures: Sequence[str], recorded: LiveReport, *, wrote: Path | None = None) -> None:
    """One ``TraceFileError`` for everything that could not be written, if anything:
    what was written all the same, and where the recording is whole."""
    if not failures:
        return
    done = f"; wrote {wrote}" if wrote is not None else ""
    files = recorded.files
    more = f" and {len(files) - 1} more pcap files" if len(files) > 1 else ""
    kept = f"; the recording is in {files[0]}{more}" if files else "; nothing was recorded"
    later = " (wirepath capture pcap converts it later)" if files and wrote is None else ""
    raise TraceFileError("; ".join(failures) + done + kept + later)


_CONVERT_OPTIONS = frozenset({"node_by", "keep_payload", "keys", "point", "part_every_s", "chunk_bytes"})
_FOLLOW_WAIT_S = 0.5  # a read of a growing file returns at most this long after its first bytes
_POLL_S = 0.05
_PCAP_HEADER = 24  # bytes of a pcap file header; a pcapng section header is longer


class _CancelledError(Exception):
    """The conversion was given up (the agent is interrupted)."""


class _Growing(io.RawIOBase):
    """A capture file read while tcpdump writes it: a read waits for more bytes until
    ``finished()`` says the file is closed (a later rotation exists, or tcpdump stopped).

    Reads return whole requests when the bytes are there, else what arrived within
    ``_FOLLOW_WAIT_S`` of the first byte, so batches stay large at high rates and come
    about twice a second at low ones. A partial record at the end of a read is kept by
    the pcap reader for the next one. While a read waits with nothing new, ``idle`` is
    called about every ``_POLL_S`` (the converter writes a part that is due: a quiet
    line must not keep the last messages out of the parts).
    """

    def __init__(
        self,
        path: Path,
        finished: Callable[[], bool],
        cancel: threading.Event,
        idle: Callable[[], None] | None = None,
    ) -> None:
        self.name = str(path)
        self._f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self._finished = finished
        self._cancel = cancel
        self._idle = idle

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._f.seek(pos, whence)

    def tell(self) -> int:
        return self._f.tell()

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        want = n if n >= 0 else 1 << 62
        parts: list[bytes] = []
        got = 0
        until = None
        while got < want:
            if self._cancel.is_set():
                raise _CancelledError
            finished = self._finished()  # asked before reading: no byte written after is missed
            chunk = self._f.read(min(want - got, 1 << 24))
            if chunk:
                parts.append(chunk)
                got += len(chunk)
                until = until or time.monotonic() + _FOLLOW_WAIT_S
                continue
            if finished or (until is not None and time.monotonic() >= until):
                break
            if self._idle is not None and not got:
                self._idle()
            self._cancel.wait(_POLL_S)
        return b"".join(parts)

    def close(self) -> None:
        self._f.close()
        super().close()


def _set_aside(out_dir: Path, previous: Path) -> None:
    """Make room for a new run's trace in ``out_dir`` without losing the last one.

    A finished run (its ``trace.parquet`` is there) moves with its parts and
    ``live.json`` into ``previous``, which it replaces whole. Parts without a
    ``trace.parquet`` are an unfinished run's (killed while recording; its pcap files
    stay): they are removed, and a finished trace already in ``previous`` stays.
    """
    trace, parts, report = out_dir / "trace.parquet", out_dir / "trace", out_dir / "live.json"
    if trace.exists():
        aside = OutputFile(previous, directory=True)
        try:
            with write_errors(previous):
                room = aside.open()
                for item in (trace, parts, report):
                    if os.path.lexists(item):
                        os.rename(item, room / item.name)
                aside.commit()
        except BaseException:
            # Put back what was moved: the earlier run stays whole where it was.
            for item in (trace, parts, report):
                with contextlib.suppress(OSError):
                    if aside.tmp is not None and os.path.lexists(aside.tmp / item.name):
                        os.rename(aside.tmp / item.name, item)
            aside.discard()
            raise
        return
    # None of an unfinished run's parts may pass for this run's.
    for old in sorted(parts.glob("part-*.parquet")) if parts.is_dir() else []:
        old.unlink()


class _Following:
    """The conversion that follows a recording, file after file, in a thread."""

    def __init__(
        self, cap: LiveCapture, *, names: Mapping[str, str] | PathLike | None, options: dict[str, Any]
    ) -> None:
        from capture.convert import StreamConverter  # the ingest pipeline; imported late, it is big

        self.cap = cap
        self.trace = cap.out_dir / "trace.parquet"
        self.parts_dir = cap.out_dir / "trace"
        self.previous = cap.out_dir / "previous"
        _set_aside(cap.out_dir, self.previous)
        self._chunk_bytes = int(options.pop("chunk_bytes", 8 << 20))
        self.converter = StreamConverter(self.trace, names=names, parts_dir=self.parts_dir, **options)
        self._recorded = threading.Event()
        self._cancel = threading.Event()
        self._error: BaseException | None = None
        #: Set when the conversion failed: the recording stops then, not hours later.
        self.failed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wirepath-convert", daemon=True)
        self._thread.start()

    def _file(self, k: int) -> Path:
        first = self.cap.first_file
        return first.with_name(first.name + (str(k) if k else ""))

    def _run(self) -> None:
        # Below the recorder: when the CPU is short, conversion waits, packets are not dropped.
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        from capture.source import PcapSource

        try:
            k = 0
            while True:
                path = self._file(k)
                while not path.exists():
                    if self._recorded.is_set() and not path.exists():
                        return  # no such file: the recording ended before it
                    if self._cancel.wait(_POLL_S):
                        return
                nxt = self._file(k + 1)
                stream = _Growing(
                    path,
                    lambda nxt=nxt: self._recorded.is_set() or nxt.exists(),
                    self._cancel,
                    idle=self.converter.flush_parts_if_due,
                )
                try:
                    self.converter.add_source(PcapSource(stream, chunk_bytes=self._chunk_bytes))
                except TraceFileError as exc:
                    # A rotation the recorder opened but never wrote a header to (it was
                    # killed, the disk filled up): the files before it make the trace.
                    if not (self._recorded.is_set() and path.stat().st_size < _PCAP_HEADER):
                        raise
                    self.converter.report.damage.append(str(exc))
                finally:
                    stream.close()
                k += 1
        except _CancelledError:
            pass
        except BaseException as exc:  # handed to the agent's thread by finish()
            self._error = exc
            self.failed.set()

    def finish(self, *, provenance: Mapping[str, Any]) -> Any:
        """Convert what the stopped recording left and publish the trace; its report."""
        self._recorded.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self.converter.finish(provenance=provenance)

    def drop_previous(self) -> None:
        """Remove the earlier run's trace set aside (``_set_aside``): this run's is published."""
        remove_quietly(self.previous)

    def abort(self) -> None:
        """Give up the conversion: no partial file is left (published parts stay)."""
        self._cancel.set()
        self._recorded.set()
        self._thread.join()
        self.converter.abort()
