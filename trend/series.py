"""Metric series in the store: one row per trial, in ``STORE/results/*.parquet``.

Columns (:data:`RESULTS_SCHEMA`): ``test`` (the series name), ``testbed``, ``build`` (the run:
a job or DUT build id), ``time`` (UTC), ``trial`` (0, 1, ... within the run), ``value``
(NaN: the trial failed), ``unit``, ``direction`` (``bigger-is-better`` for throughput,
``smaller-is-better`` for latency) and ``tags``. Each import writes one more file; when two
files hold the same (test, testbed, build), the later import replaces the earlier one.

A series is one (test, testbed); its runs are its builds in time order, each with its
trials.
"""

from __future__ import annotations

import csv
import json
import math
import os
import time as _time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracefmt import ParameterError, ParseError, Store, TraceFileError
from trend.mdl import DIRECTIONS

__all__ = [
    "IMPORT_COLUMNS",
    "RESULTS_SCHEMA",
    "Series",
    "load_series",
    "parse_time_ns",
    "read_result_rows",
    "results_table",
    "write_results",
]

RESULTS_SCHEMA = pa.schema(
    [
        ("test", pa.string()),
        ("testbed", pa.string()),
        ("build", pa.string()),
        ("time", pa.timestamp("ns", tz="UTC")),
        ("trial", pa.int32()),
        ("value", pa.float64()),
        ("unit", pa.string()),
        ("direction", pa.string()),
        ("tags", pa.list_(pa.string())),
    ]
)
#: Columns of an import file: required first, then optional ones with their defaults.
IMPORT_COLUMNS = {
    "test": None,
    "build": None,
    "time": None,
    "value": None,
    "testbed": "default",
    "trial": "row order within the build",
    "unit": "",
    "direction": "bigger-is-better",
    "tags": "",
}
_REQUIRED = [c for c, d in IMPORT_COLUMNS.items() if d is None]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time_ns(text: Any) -> int:
    """An instant as nanoseconds since the epoch: ISO-8601 (UTC if no zone) or epoch seconds.

    Examples
    --------
    >>> parse_time_ns("2024-05-01T02:00:00Z")
    1714528800000000000
    >>> parse_time_ns(1714528800)
    1714528800000000000
    >>> parse_time_ns("2024-05-01T04:00:00.000001+02:00")
    1714528800000001000
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not math.isfinite(text):
            raise ParameterError(f"time {text!r} is not a finite number")
        return round(text * 1e9)
    s = str(text).strip()
    try:
        return round(float(s) * 1e9)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        raise ParameterError(
            f"time {s!r} is neither ISO-8601 (2024-05-01T02:00:00Z) nor epoch seconds"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000  # exact, no float seconds


def _value(raw: Any) -> float:
    """A trial value: a number; empty, ``nan`` or ``fail`` is a failed trial (NaN)."""
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "nan", "fail", "failed")):
        return math.nan
    if isinstance(raw, bool):
        raise ValueError(raw)
    v = float(raw)
    if math.isinf(v):
        raise ValueError(raw)
    return v


def results_table(records: Iterable[dict[str, Any]], *, source: str = "<records>") -> pa.Table:
    """Check result records (dicts with the import columns) and build a results table.

    Parameters
    ----------
    records : iterable of dict
        One trial each (``value``), or one run each with ``values`` (a list of trials).
    source : str
        Named in error messages.

    Raises
    ------
    ParseError
        A missing column, a non-numeric or negative value, a bad time or direction, or the
        same (test, testbed, build, trial) twice; the message names the record.

    Examples
    --------
    >>> t = results_table([{"test": "ip4", "build": "b1", "time": 0, "values": [9.9, 10.1]}])
    >>> t.column("trial").to_pylist(), t.column("direction").to_pylist()
    ([0, 1], ['bigger-is-better', 'bigger-is-better'])
    """
    cols: dict[str, list[Any]] = {f.name: [] for f in RESULTS_SCHEMA}
    seen: dict[tuple[str, str, str, int], int] = {}
    next_trial: dict[tuple[str, str, str], int] = {}
    for line, rec in enumerate(records, start=1):
        given = (
            set(rec) | ({"value"} if "values" in rec else set()) | ({"time"} if "time_ns" in rec else set())
        )
        missing = [c for c in _REQUIRED if c not in given]
        if missing:
            raise ParseError(
                source, line, f"missing column {missing[0]!r} (required: {', '.join(_REQUIRED)})"
            )
        test, build = str(rec["test"]).strip(), str(rec["build"]).strip()
        testbed = str(rec.get("testbed") or "default").strip()
        if not test or not build:
            raise ParseError(source, line, "test and build must not be empty")
        direction = str(rec.get("direction") or "bigger-is-better").strip()
        if direction not in DIRECTIONS:
            raise ParseError(
                source, line, f"direction {direction!r} (must be one of {', '.join(DIRECTIONS)})"
            )
        try:
            t_ns = int(rec["time_ns"]) if "time_ns" in rec else parse_time_ns(rec["time"])
        except ParameterError as e:
            raise ParseError(source, line, str(e)) from None
        raw_values = rec["values"] if "values" in rec else [rec["value"]]
        if not isinstance(raw_values, list) or not raw_values:
            raise ParseError(source, line, "values must be a non-empty list of trial values")
        tags = rec.get("tags") or []
        if isinstance(tags, str):
            tags = [t.strip() for t in tags.split(";") if t.strip()]
        for k, raw in enumerate(raw_values):
            try:
                value = _value(raw)
            except (TypeError, ValueError):
                raise ParseError(
                    source, line, f"value {raw!r} is not a number (empty, nan or fail marks a failed trial)"
                ) from None
            if value < 0:
                raise ParseError(source, line, f"value {value:g} is negative (measurements are >= 0)")
            run = (test, testbed, build)
            if rec.get("trial") not in (None, "") and "values" not in rec:
                try:
                    trial = int(rec["trial"])
                except (TypeError, ValueError):
                    raise ParseError(source, line, f"trial {rec['trial']!r} is not an integer") from None
            else:
                trial = next_trial.get(run, 0) + k if "values" not in rec else k
            next_trial[run] = max(next_trial.get(run, 0), trial + 1)
            key = (*run, trial)
            if key in seen:
                raise ParseError(
                    source,
                    line,
                    f"duplicate: test {test!r} testbed {testbed!r} build {build!r} trial {trial} "
                    f"already given on record {seen[key]}",
                )
            seen[key] = line
            for name, v in (
                ("test", test),
                ("testbed", testbed),
                ("build", build),
                ("time", t_ns),
                ("trial", trial),
                ("value", value),
                ("unit", str(rec.get("unit") or "")),
                ("direction", direction),
                ("tags", list(tags)),
            ):
                cols[name].append(v)
    if not cols["test"]:
        raise ParseError(source, 1, "no results (the file holds no records)")
    return (
        pa.table(
            {
                **{k: v for k, v in cols.items() if k != "time"},
                "time": pa.array(cols["time"], pa.int64()).cast(RESULTS_SCHEMA.field("time").type),
            }
        )
        .select(RESULTS_SCHEMA.names)
        .cast(RESULTS_SCHEMA)
    )


def read_result_rows(path: str | os.PathLike[str]) -> pa.Table:
    """Read a CSV (header with :data:`IMPORT_COLUMNS`) or JSON (list of records) result file.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "r.csv"
    >>> _ = p.write_text("test,build,time,value\\nip4,b1,2024-05-01T02:00:00Z,10.5\\n")
    >>> read_result_rows(p).num_rows
    1
    """
    name = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise TraceFileError(f"cannot read {name}: {e.strerror}") from None
    if name.endswith(".json"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ParseError(name, e.lineno, f"not JSON: {e.msg}") from None
        records = doc.get("results") if isinstance(doc, dict) else doc
        if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
            raise ParseError(name, 1, 'JSON results must be a list of objects (or {"results": [...]})')
        return results_table(records, source=name)
    if not name.endswith(".csv"):
        raise ParameterError(f"{name}: result files are .csv or .json")
    rows = list(csv.reader(text.splitlines()))
    if not rows:
        raise ParseError(name, 1, f"empty file (expected a header with {', '.join(_REQUIRED)})")
    header = [h.strip() for h in rows[0]]
    unknown = [h for h in header if h not in IMPORT_COLUMNS]
    if unknown:
        raise ParseError(name, 1, f"unknown column {unknown[0]!r} (columns: {', '.join(IMPORT_COLUMNS)})")
    records = []
    for line, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise ParseError(name, line, f"{len(row)} fields, the header has {len(header)}")
        records.append(dict(zip(header, row, strict=True)))

    # Error lines count records; map them back to file lines through a wrapper.
    try:
        return results_table(records, source=name)
    except ParseError as e:
        raise ParseError(name, e.line + 1, e.reason) from None


def write_results(store: Store, table: pa.Table, *, name: str = "import") -> Path:
    """Add a results table to the store as a new Parquet file; returns its path."""
    table = table.select(RESULTS_SCHEMA.names).cast(RESULTS_SCHEMA)
    store.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = _time.strftime("%Y%m%dT%H%M%S", _time.gmtime())
    k = 0
    while (path := store.results_dir / f"{stamp}-{k:04d}-{name}.parquet").exists():
        k += 1
    pq.write_table(table, path)
    return path


@dataclass(frozen=True)
class Series:
    """One test on one testbed: its runs (builds) in time order, each with its trials."""

    test: str
    testbed: str
    unit: str
    direction: str
    builds: tuple[str, ...]
    times_ns: np.ndarray
    trials: tuple[np.ndarray, ...]

    @property
    def runs(self) -> int:
        return len(self.builds)

    @property
    def failed(self) -> np.ndarray:
        """Runs all of whose trials failed."""
        return np.array([bool(np.isnan(t).all()) for t in self.trials], dtype=bool)

    @property
    def failed_trials(self) -> np.ndarray:
        return np.array([int(np.isnan(t).sum()) for t in self.trials], dtype=np.int64)

    @property
    def values(self) -> np.ndarray:
        """The run values: the average of the trials that did not fail (NaN for a failed run)."""
        out = np.full(self.runs, np.nan)
        for k, t in enumerate(self.trials):
            ok = t[~np.isnan(t)]
            if ok.size:
                out[k] = ok.mean()
        return out


def _read_store_results(store: Store) -> pa.Table:
    files = sorted(store.results_dir.glob("*.parquet"))
    if not files:
        return RESULTS_SCHEMA.empty_table()
    parts = []
    for order, f in enumerate(files):
        try:
            t = pq.read_table(f)
        except (OSError, pa.ArrowInvalid) as e:
            raise TraceFileError(f"{f}: not a readable results file ({e})") from None
        missing = [c for c in RESULTS_SCHEMA.names if c not in t.column_names]
        if missing:
            raise TraceFileError(f"{f}: results file without column {missing[0]!r}")
        t = t.select(RESULTS_SCHEMA.names).cast(RESULTS_SCHEMA)
        parts.append(t.append_column("_file", pa.array(np.full(t.num_rows, order, np.int32))))
    return pa.concat_tables(parts)


def load_series(store: Store | str | os.PathLike[str], *, tests: Sequence[str] | None = None) -> list[Series]:
    """Every series of the store (or those whose test name contains one of ``tests``).

    A (test, testbed, build) stored by several imports comes from the latest one. Runs are
    ordered by time, then build.
    """
    if not isinstance(store, Store):
        if not Path(store, "results").is_dir():
            raise TraceFileError(f"{store}: not a wirepath store with results (no results/ directory)")
        store = Store(Path(store))
    table = _read_store_results(store)
    if tests:
        keep = np.zeros(table.num_rows, dtype=bool)
        names = table.column("test").to_numpy(zero_copy_only=False).astype(str)
        for t in tests:
            keep |= np.char.find(names, t) >= 0
        table = table.filter(pa.array(keep))
    if table.num_rows == 0:
        return []
    table = table.drop_columns(["tags"])  # not needed here, and joins cannot carry lists
    latest = (
        table.group_by(["test", "testbed", "build"])
        .aggregate([("_file", "max")])
        .rename_columns(["test", "testbed", "build", "_latest"])
    )
    table = table.join(latest, ["test", "testbed", "build"])
    table = table.filter(pc.equal(table["_file"], table["_latest"]))
    table = table.sort_by([(c, "ascending") for c in ("test", "testbed", "build", "trial")])
    t_ns = table.column("time").cast(pa.int64()).to_numpy()
    values = table.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
    codes = [
        table.column(c).combine_chunks().dictionary_encode().indices.to_numpy()
        for c in ("test", "testbed", "build")
    ]
    # Boundaries of runs (a new test, testbed or build) and of series (a new test or testbed).
    n = table.num_rows
    new_series = np.zeros(n, dtype=bool)
    new_series[0] = True
    new_series[1:] = (np.diff(codes[0]) != 0) | (np.diff(codes[1]) != 0)
    new_run = new_series.copy()
    new_run[1:] |= np.diff(codes[2]) != 0
    run_starts = np.flatnonzero(new_run)
    run_time = np.minimum.reduceat(t_ns, run_starts)
    run_trials = np.split(values, run_starts[1:])
    run_series = np.cumsum(new_series)[run_starts] - 1
    series_first = np.flatnonzero(new_series)
    cols = {
        c: table.column(c).take(pa.array(series_first)).to_pylist()
        for c in ("test", "testbed", "unit", "direction")
    }
    run_build = table.column("build").take(pa.array(run_starts)).to_pylist()
    bounds = np.searchsorted(run_series, np.arange(series_first.size + 1))
    series: list[Series] = []
    for k in range(series_first.size):
        lo, hi = bounds[k], bounds[k + 1]
        builds = np.array(run_build[lo:hi], dtype=object)
        order = np.lexsort((builds.astype(str), run_time[lo:hi]))  # time, then build
        series.append(
            Series(
                test=cols["test"][k],
                testbed=cols["testbed"][k],
                unit=cols["unit"][k],
                direction=cols["direction"][k],
                builds=tuple(builds[order].tolist()),
                times_ns=run_time[lo:hi][order],
                trials=tuple(run_trials[lo + j] for j in order),
            )
        )
    return series
