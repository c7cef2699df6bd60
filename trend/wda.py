"""Mako's Window Deviation Analyzer: the recent runs against a historic window.

The runs are put in run order (timestamp or build id); the current run is the last. For each
tolerance check the chosen metric is extracted from every run, the last
``recent_window_size`` values form the recent window and the rest the historic one. A
params entry regresses when ``|delta| > tolerance`` in a direction the bias does not
ignore; a check regresses only when every one of its params entries does; the analysis
regresses when any check does. Statistics as Mako computes them: population standard
deviation, medians by linearly interpolated percentiles, MAD unscaled.

Mako's statuses and messages are kept: ``SUCCESS`` (``okay`` or ``Found N regressed
checks``), ``FAIL`` (data extraction failed, too little data without
``ignore_missing_data``, a NaN or negative tolerance, inconsistent run orders), and a
``SKIPPED`` check when data is short but may be ignored. Two departures, so that bad data
never passes: a NaN in the recent window (a failed run) regresses every params entry,
whatever the bias (Mako compares ``|NaN| > tolerance``, false, and passes it), and an
infinite tolerance (overflowing data) is a ``FAIL``. Infinite values are refused.
"""

from __future__ import annotations

import csv
import io
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tracefmt import ParameterError, ParseError
from tracefmt.configfile import load_json
from trend._files import MAX_RESULTS_BYTES, read_text
from trend.numbers import check_number, finite_json

__all__ = ["WdaResult", "WdaRun", "analyze_wda", "load_wda_config", "read_wda_runs"]

RUN_ORDERS = ("TIMESTAMP", "BUILD_ID")
BIASES = ("NO_BIAS", "IGNORE_INCREASE", "IGNORE_DECREASE")
_CHECK_KEYS = {
    "data_filter",
    "recent_window_size",
    "minimum_historical_window_size",
    "direction_bias",
    "mean_tolerance_params_list",
    "median_tolerance_params_list",
    "name",
}
_MEAN_KEYS = {"const_term", "mean_coeff", "stddev_coeff"}
_MEDIAN_KEYS = {"const_term", "median_coeff", "mad_coeff"}
_TOLERANCE_KEYS = {"mean": _MEAN_KEYS, "median": _MEDIAN_KEYS}
RUNS_COLUMNS = ("run_key", "timestamp_ms", "build_id", "metric", "value")


@dataclass(frozen=True)
class WdaRun:
    """One run: its key, order fields and metric values (``None``: the run lacks the metric)."""

    run_key: str
    timestamp_ms: float | None
    build_id: float | None
    values: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class WdaResult:
    """The analysis: Mako's status, the verdict, its message and one entry per check."""

    status: str
    regression: bool
    message: str
    checks: tuple[dict[str, Any], ...] = ()

    @property
    def checks_skipped(self) -> int:
        return sum(c["result"] == "SKIPPED" for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        """The JSON document; NaN or infinite statistics (NaN values in the data) become null."""
        return {
            "status": self.status,
            "regression": self.regression,
            "message": self.message,
            "checks_skipped": self.checks_skipped,
            "checks": finite_json(list(self.checks)),
        }


class _FailError(Exception):
    """Mako's analyzer failure: reported as status FAIL, not raised to the caller."""


def load_wda_config(source: str | os.PathLike[str] | dict[str, Any]) -> dict[str, Any]:
    """Read and check a WDA configuration (Mako's field names), filling Mako's defaults.

    Parameters
    ----------
    source : path or dict
        A JSON file or its parsed content: ``tolerance_check_list`` and ``run_order``
        (``TIMESTAMP``, the default, or ``BUILD_ID``), or Mako's ``run_info_query_list``.

    Returns
    -------
    dict
        The configuration with every default written out.

    Examples
    --------
    >>> cfg = load_wda_config({"tolerance_check_list": [{"data_filter": {"value_key": "y"},
    ...                        "mean_tolerance_params_list": [{"const_term": 1}]}]})
    >>> cfg["tolerance_check_list"][0]["recent_window_size"], cfg["run_order"]
    (1, 'TIMESTAMP')
    """
    if isinstance(source, dict):
        raw = source
    else:
        raw = load_json(read_text(source, "a WDA config (JSON)"), str(source))
    if not isinstance(raw, dict) or not isinstance(raw.get("tolerance_check_list"), list):
        raise ParameterError("WDA config needs a 'tolerance_check_list' list of checks")
    orders = _run_orders(raw)
    checks = [_load_check(k, check) for k, check in enumerate(raw["tolerance_check_list"])]
    return {
        "run_order": orders[0] if orders else "TIMESTAMP",
        "consistent_run_order": len(set(orders)) <= 1,
        "tolerance_check_list": checks,
    }


def _run_orders(raw: dict[str, Any]) -> list[str]:
    """Every run order the configuration names (its queries', then its own), each checked."""
    orders = [q.get("run_order", "TIMESTAMP") for q in raw.get("run_info_query_list", []) or []]
    if "run_order" in raw:
        orders.append(raw["run_order"])
    for order in orders:
        if order not in RUN_ORDERS:
            raise ParameterError(f"unknown run_order {order!r} (must be one of {', '.join(RUN_ORDERS)})")
    return orders


def _load_check(k: int, check: Any) -> dict[str, Any]:
    """Check ``tolerance_check_list[k]`` and write out its defaults."""
    where = f"tolerance_check_list[{k}]"
    if not isinstance(check, dict):
        raise ParameterError(f"{where} must be an object")
    unknown = sorted(set(check) - _CHECK_KEYS)
    if unknown:
        raise ParameterError(
            f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(sorted(_CHECK_KEYS))})"
        )
    flt = dict(check.get("data_filter") or {})
    if not flt.get("value_key") and not flt.get("data_type"):
        raise ParameterError(f"{where}.data_filter needs a value_key (the metric name in RUNS.csv)")
    bias = check.get("direction_bias", "NO_BIAS")
    if bias not in BIASES:
        raise ParameterError(f"{where}: unknown direction_bias {bias!r} (must be one of {', '.join(BIASES)})")
    params = {kind: _tolerance_params(where, check, kind, keys) for kind, keys in _TOLERANCE_KEYS.items()}
    recent = check.get("recent_window_size", 1)
    minimum = check.get("minimum_historical_window_size", 3)
    for name, v in (("recent_window_size", recent), ("minimum_historical_window_size", minimum)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ParameterError(f"{where}: {name} must be a positive integer, not {v!r}")
    return {
        "name": check.get("name", f"check {k}"),
        "data_filter": {
            "value_key": flt.get("value_key") or str(flt["data_type"]).lower(),
            "ignore_missing_data": bool(flt.get("ignore_missing_data", True)),
        },
        "recent_window_size": recent,
        "minimum_historical_window_size": minimum,
        "direction_bias": bias,
        "mean_tolerance_params_list": params["mean"],
        "median_tolerance_params_list": params["median"],
    }


def _tolerance_params(where: str, check: dict[str, Any], kind: str, keys: set[str]) -> list[dict[str, float]]:
    """The check's ``{kind}_tolerance_params_list``, each entry with all of ``keys`` (0 if not given)."""
    entries = []
    for p in check.get(f"{kind}_tolerance_params_list", []) or []:
        bad = sorted(set(p) - keys)
        if bad:
            raise ParameterError(
                f"{where}: unknown {kind} tolerance field {bad[0]!r} (fields: {', '.join(sorted(keys))})"
            )
        entries.append({key: check_number(p.get(key, 0.0), f"{where} {key}") for key in sorted(keys)})
    return entries


def _optional_number(text: str, path: str, line: int, column: str, *, nan: bool = False) -> float | None:
    """A cell's number (``None`` if empty); infinities, and NaN unless ``nan``, are refused."""
    if text.strip() == "":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ParseError(path, line, f"{column} {text!r} is not a number") from None
    if nan and math.isnan(value):
        return value
    try:
        return check_number(value, f"{column} {text.strip()!r}")
    except ParameterError as e:
        raise ParseError(path, line, str(e)) from None


def read_wda_runs(path: str | os.PathLike[str]) -> list[WdaRun]:
    """Read ``run_key,timestamp_ms,build_id,metric,value`` rows into runs, in file order.

    Rows of one run follow each other with the same ``run_key``; a repeated metric (or a
    new key) starts the next run. An empty ``value`` is missing data; ``nan`` is a NaN
    value.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "runs.csv"
    >>> _ = p.write_text("run_key,timestamp_ms,build_id,metric,value\\nh1,1,,y,45\\nh1,1,,z,\\n")
    >>> read_wda_runs(p)[0].values
    {'y': 45.0, 'z': None}
    """
    name = str(path)
    reader = csv.reader(
        io.StringIO(read_text(path, "a CSV of WDA runs", limit=MAX_RESULTS_BYTES), newline="")
    )
    header = next(reader, None)
    if header is None:
        raise ParseError(name, 1, f"empty file (expected the header {','.join(RUNS_COLUMNS)})")
    header = [h.strip() for h in header]
    missing = [c for c in RUNS_COLUMNS if c not in header]
    if missing:
        raise ParseError(name, 1, f"missing column {missing[0]!r} (columns: {','.join(RUNS_COLUMNS)})")
    col = {c: header.index(c) for c in RUNS_COLUMNS}
    runs: list[WdaRun] = []
    for line, row in enumerate(reader, start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) < len(header):
            raise ParseError(name, line, f"{len(row)} fields, expected {len(header)}")
        key, metric = row[col["run_key"]].strip(), row[col["metric"]].strip()
        if not key or not metric:
            raise ParseError(name, line, "run_key and metric must not be empty")
        value = _optional_number(row[col["value"]], name, line, "value", nan=True)
        if runs and runs[-1].run_key == key and metric not in runs[-1].values:
            runs[-1].values[metric] = value
            continue
        ts = _optional_number(row[col["timestamp_ms"]], name, line, "timestamp_ms")
        build = _optional_number(row[col["build_id"]], name, line, "build_id")
        runs.append(WdaRun(key, ts, build, {metric: value}))
    if not runs:
        raise ParseError(name, 2, "no runs (need at least one row after the header)")
    return runs


def _median(x: np.ndarray) -> float:
    return float(np.percentile(x, 50)) if not np.isnan(x).any() else math.nan


def _extract(check: dict[str, Any], runs: list[WdaRun], order_key: str) -> tuple[list[float], list[float]]:
    """The check's metric from every run that has it, and the runs' order values."""
    key = check["data_filter"]["value_key"]
    data, order = [], []
    for run in runs:
        v = run.values.get(key)
        if v is None:
            if not check["data_filter"]["ignore_missing_data"]:
                raise _FailError("Run data extraction failed")
            continue
        if not math.isnan(v):  # NaN is data (Mako's), an infinity is not
            check_number(v, f"run {run.run_key!r} {key}")
        data.append(v)
        order.append(getattr(run, order_key) or 0.0)
    return data, order


def _stats(hist: np.ndarray, recent: np.ndarray) -> dict[str, float]:
    """Mako's statistics of the two windows (NaN where a window holds NaN)."""
    with np.errstate(over="ignore", invalid="ignore"):  # huge values: inf, then FAIL below
        h_mean, h_median = float(np.mean(hist)), _median(hist)
        stats = {
            "historic_mean": h_mean,
            "historic_median": h_median,
            "historic_stddev": float(np.sqrt(np.mean((hist - h_mean) ** 2))),
            "historic_mad": _median(np.abs(hist - h_median)),
            "recent_mean": float(np.mean(recent)),
            "recent_median": _median(recent),
        }
        stats["delta_mean"] = stats["recent_mean"] - h_mean
        stats["delta_median"] = stats["recent_median"] - h_median
    return stats


def _params(check: dict[str, Any], stats: dict[str, float]) -> list[dict[str, Any]]:
    """One verdict per params entry. A NaN delta (a NaN in the recent window: a failed run)
    is never within tolerance, whatever the bias: a failed run does not pass."""
    results = []
    for kind, (center, spread, cc, sc) in (
        ("mean", ("historic_mean", "historic_stddev", "mean_coeff", "stddev_coeff")),
        ("median", ("historic_median", "historic_mad", "median_coeff", "mad_coeff")),
    ):
        for p in check[f"{kind}_tolerance_params_list"]:
            tol = p["const_term"] + p[cc] * abs(stats[center]) + p[sc] * stats[spread]
            if not tol >= 0:  # NaN too
                raise _FailError(f"Tolerance must be nonnegative. Got: {tol:g}")
            if math.isinf(tol):  # Mako would pass everything
                raise _FailError(f"Tolerance must be finite. Got: {tol:g}")
            delta = stats[f"delta_{kind}"]
            ignored = (delta <= 0 and check["direction_bias"] == "IGNORE_DECREASE") or (
                delta >= 0 and check["direction_bias"] == "IGNORE_INCREASE"
            )
            within = abs(delta) <= tol  # False for NaN
            results.append(
                {"kind": kind, "tolerance": tol, "delta": delta, "is_regressed": not within and not ignored}
            )
    return results


def _check(check: dict[str, Any], runs: list[WdaRun], order_key: str) -> dict[str, Any]:
    data, order = _extract(check, runs, order_key)
    recent_size = check["recent_window_size"]
    need = recent_size + check["minimum_historical_window_size"]
    if len(data) < need:
        if check["data_filter"]["ignore_missing_data"]:
            return {"result": "SKIPPED", "data_length": len(data), "needed": need}
        raise _FailError(
            f"Failure computing stats: Total data length ({len(data)}) is less than "
            f"recent_window_size + minimum_historical_window_size ({need})"
        )
    values = np.asarray(data, dtype=np.float64)
    hist, recent = values[:-recent_size], values[-recent_size:]
    stats = _stats(hist, recent)
    results = _params(check, stats)
    regressed = bool(results) and all(r["is_regressed"] for r in results)
    return {
        "result": "REGRESSED" if regressed else "PASSED",
        "stats": stats,
        "params": results,
        "historic_window": [order[0], order[len(hist) - 1]],
    }


def analyze_wda(config: dict[str, Any], runs: list[WdaRun]) -> WdaResult:
    """Run the window deviation analysis: the current run is the last in run order.

    Parameters
    ----------
    config : dict
        As :func:`load_wda_config` returns (a raw dict is checked by it first).
    runs : list of WdaRun
        The runs in any order; they are sorted stably by the configured run order.

    Returns
    -------
    WdaResult
        Status ``SUCCESS`` or ``FAIL`` (Mako's messages), the verdict and per-check details.

    Examples
    --------
    >>> runs = [WdaRun(f"h{i}", float(i), None, {"y": v}) for i, v in enumerate([45, 50, 55, 52])]
    >>> cfg = {"tolerance_check_list": [{"data_filter": {"value_key": "y"},
    ...        "mean_tolerance_params_list": [{"const_term": 1}]}]}
    >>> r = analyze_wda(cfg, runs)
    >>> r.status, r.regression, r.message
    ('SUCCESS', True, 'Found 1 regressed checks')
    """
    if "consistent_run_order" not in config:
        config = load_wda_config(config)
    if not config["consistent_run_order"]:
        return WdaResult("FAIL", False, "Inconsistent run_order field")
    order_key = "timestamp_ms" if config["run_order"] == "TIMESTAMP" else "build_id"
    unordered = [r.run_key for r in runs if getattr(r, order_key) is None]
    if unordered and len(runs) > 1:
        raise ParameterError(
            f"run {unordered[0]!r} has no {order_key}, which run_order {config['run_order']} needs"
        )
    ordered = sorted(runs, key=lambda r: getattr(r, order_key) or 0.0)
    try:
        checks = tuple(_check(c, ordered, order_key) for c in config["tolerance_check_list"])
    except _FailError as e:
        return WdaResult("FAIL", False, str(e))
    regressed = sum(c["result"] == "REGRESSED" for c in checks)
    message = f"Found {regressed} regressed checks" if regressed else "okay"
    return WdaResult("SUCCESS", regressed > 0, message, checks)
