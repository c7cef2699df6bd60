"""What a live capture does to the files of an earlier run in its directory, and what it
says when its own cannot be written (no tcpdump needed: the recorder and the conversion
are stand-ins)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import capture.live
from capture.live import LiveStats, _set_aside, capture_live
from tracefmt import TraceFileError, make_dirs

DISK_FULL = "no space left on the device (the disk is full)"


def earlier_run(out: Path, name: str = "old") -> None:
    """What a finished run leaves: its trace, its parts and its report."""
    (out / "trace").mkdir(parents=True)
    (out / "trace" / "part-00000.parquet").write_text(f"{name} part")
    (out / "trace.parquet").write_text(f"{name} trace")
    (out / "live.json").write_text(f"{name} report")


def test_a_finished_runs_trace_is_set_aside_whole(tmp_path: Path) -> None:
    earlier_run(tmp_path, "older")
    _set_aside(tmp_path, tmp_path / "previous")
    earlier_run(tmp_path)
    _set_aside(tmp_path, tmp_path / "previous")  # replaces the older one
    previous = tmp_path / "previous"
    assert (previous / "trace.parquet").read_text() == "old trace"
    assert (previous / "trace" / "part-00000.parquet").read_text() == "old part"
    assert (previous / "live.json").read_text() == "old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["previous"]


def test_an_unfinished_runs_parts_go_and_the_finished_trace_stays(tmp_path: Path) -> None:
    earlier_run(tmp_path)
    _set_aside(tmp_path, tmp_path / "previous")
    # A run killed while recording: parts, no trace.parquet (its pcap files stay).
    (tmp_path / "trace").mkdir()
    (tmp_path / "trace" / "part-00000.parquet").write_text("killed part")
    _set_aside(tmp_path, tmp_path / "previous")
    assert (tmp_path / "previous" / "trace.parquet").read_text() == "old trace"
    assert list((tmp_path / "trace").iterdir()) == []


class _Recorder:
    """A stand-in for tcpdump: one pcap file, recorded at once."""

    def __init__(self, iface: str, out_dir: Path, recording: Any) -> None:
        self.iface, self.out_dir = iface, Path(out_dir)
        self.first_file = self.out_dir / "capture-1.pcap"
        self.started, self.duration_s = datetime.now(UTC), 1.0

    def start(self) -> None:
        make_dirs(self.out_dir)
        self.first_file.write_bytes(b"packets")

    def wait(self, **_: Any) -> str:
        return "duration"

    def stop(self) -> LiveStats:
        return LiveStats(captured=3633)

    def files(self) -> list[Path]:
        return [self.first_file]

    def error_message(self) -> None:
        return None


def _stand_ins(monkeypatch: pytest.MonkeyPatch, *, trace_fits: bool, report_fits: bool) -> dict[str, Any]:
    seen: dict[str, Any] = {"aborted": False}
    real_following = capture.live._Following

    class Following:
        def __init__(self, cap: _Recorder, *, names: Any, options: Any) -> None:
            self.trace, self.parts_dir = cap.out_dir / "trace.parquet", cap.out_dir / "trace"
            self.previous = cap.out_dir / "previous"
            _set_aside(cap.out_dir, self.previous)
            self.failed = threading.Event()

        def finish(self, *, provenance: Any) -> Any:
            if not trace_fits:
                raise TraceFileError(f"cannot write {self.trace}: {DISK_FULL}")
            self.trace.write_text("new trace")
            return LiveStats()  # anything with to_json

        def abort(self) -> None:
            seen["aborted"] = True

        drop_previous = real_following.drop_previous

    real_write = capture.live.write_atomic

    def write_atomic(path: Path, data: str) -> Path:
        if not report_fits:
            raise TraceFileError(f"cannot write {path}: {DISK_FULL}")
        return real_write(path, data)

    monkeypatch.setattr(capture.live, "LiveCapture", _Recorder)
    monkeypatch.setattr(capture.live, "_Following", Following)
    monkeypatch.setattr(capture.live, "write_atomic", write_atomic)
    return seen


def test_a_full_disk_says_what_failed_and_where_the_recording_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier_run(tmp_path)
    seen = _stand_ins(monkeypatch, trace_fits=False, report_fits=False)
    with pytest.raises(TraceFileError) as err:
        capture_live("eth9", tmp_path)
    assert str(err.value) == (
        f"cannot write {tmp_path / 'live.json'}: {DISK_FULL}; "
        f"cannot write {tmp_path / 'trace.parquet'}: {DISK_FULL}; "
        f"the recording is in {tmp_path / 'capture-1.pcap'} (wirepath capture pcap converts it later)"
    )
    assert seen["aborted"]  # the conversion's partial files are removed
    assert (tmp_path / "previous" / "trace.parquet").read_text() == "old trace"


def test_the_trace_is_written_when_only_the_report_does_not_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_ins(monkeypatch, trace_fits=True, report_fits=False)
    with pytest.raises(TraceFileError) as err:
        capture_live("eth9", tmp_path)
    assert str(err.value).startswith(f"cannot write {tmp_path / 'live.json'}: {DISK_FULL}; ")
    assert f"; wrote {tmp_path / 'trace.parquet'}; the recording is in " in str(err.value)
    assert (tmp_path / "trace.parquet").read_text() == "new trace"


def test_the_earlier_trace_goes_once_the_new_one_is_published(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier_run(tmp_path)
    _stand_ins(monkeypatch, trace_fits=True, report_fits=True)
    capture_live("eth9", tmp_path)
    assert (tmp_path / "trace.parquet").read_text() == "new trace"
    assert not (tmp_path / "previous").exists()
