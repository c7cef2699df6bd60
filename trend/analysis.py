"""One series analysed: trend values, marks, trend compliance; the alert text for many.

:func:`analyze_all` analyses many series, in this process or as tasks of a Dask cluster
(one task per group of series; see ``docs/scaling.md``).

Failed runs (every trial failed) are left out of the grouping and marked ``failed`` at
their own place: the marks of the other runs never shift (CSIT's dashboard maps failed
runs to 0.0 for grouping and then puts the marks one run late).
"""

from __future__ import annotations

import contextlib
import html
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tracefmt import ParameterError, format_instant_ns, format_instants_ns
from tracefmt.cluster import InProcess, Runner, split_evenly
from tracefmt.display import printable
from trend.mdl import MdlGroup, MdlPrograms, classify_mdl, resolve_unit, trial_stats
from trend.numbers import METHODS
from trend.series import Series
from trend.tmm import classify_tmm

__all__ = ["METHODS", "SeriesTrend", "alert_text", "analyze_all", "analyze_series", "trend_compliance"]

WEEK_NS = 7 * 86_400 * 1_000_000_000
QUARTER_NS = 90 * 86_400 * 1_000_000_000
#: Groups of series per task slot of a cluster: enough that a slow group (long series)
#: does not leave the other workers idle at the end, few enough that the per-task overhead
#: (milliseconds) stays small against a group's work.
GROUPS_PER_SLOT = 4


@dataclass(frozen=True)
class SeriesTrend:
    """A series with its trend: per run the trend value (group average or TMM) and mark."""

    series: Series
    method: str
    values: np.ndarray
    trend: np.ndarray
    marks: np.ndarray
    groups: tuple[MdlGroup, ...]
    short_change: float | None
    long_change: float | None

    @property
    def regressions(self) -> int:
        return int((self.marks == "regression").sum())

    @property
    def progressions(self) -> int:
        return int((self.marks == "progression").sum())

    @property
    def last_trend(self) -> float | None:
        ok = ~np.isnan(self.trend)
        return float(self.trend[ok][-1]) if ok.any() else None

    @property
    def runs_in_last_group(self) -> int:
        """Runs since the trend last changed (the last group's runs for ``mdl``)."""
        anomalies = np.flatnonzero((self.marks == "regression") | (self.marks == "progression"))
        valid = self.marks != "failed"
        start = anomalies[-1] if anomalies.size else 0
        return int(valid[start:].sum())

    @property
    def regressed(self) -> bool:
        """Whether the newest run is in a regression: it is marked one (``tmm``) or its
        group is one (``mdl``)."""
        if self.method == "mdl":
            return bool(self.groups) and self.groups[-1].comment == "regression"
        valid = self.marks[self.marks != "failed"]
        return bool(valid.size) and valid[-1] == "regression"

    @property
    def regression_start(self) -> int | None:
        """The run where the newest regression started."""
        hits = np.flatnonzero(self.marks == "regression")
        return int(hits[-1]) if hits.size else None

    def to_json(self) -> dict[str, Any]:
        s = self.series

        def nums(x: np.ndarray) -> list[float | None]:
            return [None if v != v else v for v in x.tolist()]  # NaN is the only value unequal to itself

        return {
            "test": s.test,
            "testbed": s.testbed,
            "unit": s.unit,
            "direction": s.direction,
            "method": self.method,
            "runs": [
                {"build": b, "time": t, "value": v, "trend": tr, "mark": m, "failed_trials": f}
                for b, t, v, tr, m, f in zip(
                    s.builds,
                    format_instants_ns(s.times_ns),
                    nums(self.values),
                    nums(self.trend),
                    self.marks.tolist(),
                    s.failed_trials.tolist(),
                    strict=True,
                )
            ],
            "groups": [g.to_json() for g in self.groups],
            "last_trend": self.last_trend,
            "short_change": self.short_change,
            "long_change": self.long_change,
            "regressions": self.regressions,
            "progressions": self.progressions,
            "runs_in_last_group": self.runs_in_last_group,
            "regressed": self.regressed,
        }


def trend_compliance(
    times_ns: np.ndarray, trend: np.ndarray, direction: str = "bigger-is-better"
) -> tuple[float | None, float | None]:
    """Short- and long-term change of the last trend value, as fractions.

    Short-term: against the trend value one week before the last run (the last run at or
    before that instant). Long-term: against the best trend value (the maximum; the minimum
    for a smaller-is-better series) of the runs from one quarter (90 days) to one week
    before the last run. ``None`` where no such run exists or the reference is 0.

    Examples
    --------
    >>> day = 86_400 * 10**9
    >>> t = np.array([0, 30, 80, 93, 100]) * day
    >>> trend_compliance(t, np.array([10.0, 12.0, 11.0, 10.0, 9.0]))
    (-0.1, -0.25)
    """
    ok = ~np.isnan(trend)
    times_ns, trend = np.asarray(times_ns)[ok], np.asarray(trend)[ok]
    if trend.size == 0:
        return None, None
    last_t, v = times_ns[-1], float(trend[-1])

    def change(ref: float) -> float | None:
        return None if ref == 0 else (v - ref) / ref

    week = np.flatnonzero(times_ns <= last_t - WEEK_NS)
    short = change(float(trend[week[-1]])) if week.size else None
    window = (times_ns >= last_t - QUARTER_NS) & (times_ns <= last_t - WEEK_NS)
    if not window.any():
        return short, None
    best = trend[window].max() if direction == "bigger-is-better" else trend[window].min()
    return short, change(float(best))


def analyze_series(
    series: Series,
    *,
    method: str = "mdl",
    window: int = 14,
    unit: float | None = None,
    sbps: float | None = None,
) -> SeriesTrend:
    """The trend of one series by ``mdl`` (jumpavg grouping; runs of several trials stay
    whole; ``unit`` and ``sbps`` as jumpavg's) or ``tmm`` (trimmed moving statistics over
    ``window`` runs).

    A series whose valid values are all 0 is one normal group (without bits).

    Raises
    ------
    ParameterError
        An unknown method, a bad window, unit or sbps, or an infinite or negative value;
        the message names the test and testbed.

    Examples
    --------
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1", "b2", "b3"),
    ...            np.array([0, 1, 2]) * 10**9, (np.array([5.0]), np.array([np.nan]), np.array([5.0])))
    >>> analyze_series(s).marks.tolist()
    ['normal', 'failed', 'normal']
    """
    if method not in METHODS:
        raise ParameterError(f"unknown method {method!r} (must be one of {', '.join(METHODS)})")
    try:
        return _analyze(series, method, window, unit, sbps)
    except ParameterError as e:  # a bad value in the store, or a unit that does not fit it
        raise ParameterError(f"test {series.test!r} testbed {series.testbed!r}: {e}") from None


def analyze_all(
    series: Sequence[Series],
    *,
    method: str = "mdl",
    window: int = 14,
    unit: float | None = None,
    sbps: float | None = None,
    runner: Runner | None = None,
    on_error: Callable[[Series, ParameterError], None] | None = None,
    state: str | os.PathLike[str] | None = None,
) -> list[SeriesTrend]:
    """:func:`analyze_series` of every series, in order; on ``runner``'s workers if given.

    In this process every series is analysed at once: the runs' statistics flat, and the
    MDL programs of all series in one compiled pass (:class:`trend.mdl.MdlPrograms`). With
    ``state`` (a file, :mod:`trend.state`) an MDL analysis in this process resumes the
    programs saved there by the last one and saves its own: a series whose runs are those
    it saw plus new ones costs only the new ones. The result is the same either way.

    With a cluster runner (:func:`tracefmt.cluster.open_runner`) the series are dealt into
    contiguous groups, about :data:`GROUPS_PER_SLOT` per task slot and never more groups
    than series, and each group is one task. The result is the same as in this process:
    the same values, and each :class:`SeriesTrend` holds the caller's own :class:`Series`
    (only the computed arrays come back from the workers). An error is the one the run in
    this process raises: that of the first bad series in order.

    Parameters
    ----------
    series : sequence of Series
        The series to analyse.
    method, window, unit, sbps
        As :func:`analyze_series`.
    runner : Runner, optional
        Where the work runs; ``None`` (or the in-process runner) analyses the series here,
        one after the other.
    on_error : callable, optional
        Called with a series that cannot be analysed and its error, which is then left out
        of the result: one bad series does not hide the others. Without it the first
        error is raised.
    state : path, optional
        The programs' state file (``trend.state.state_path(store)``); unused with a
        cluster runner or ``tmm``.

    Raises
    ------
    ParameterError
        As :func:`analyze_series` (without ``on_error``).

    Examples
    --------
    >>> from tracefmt.cluster import open_runner
    >>> s = Series("ip4", "tb1", "pps", "bigger-is-better", ("b1", "b2"),
    ...            np.array([0, 1]) * 10**9, (np.array([5.0]), np.array([5.0])))
    >>> with open_runner() as run:
    ...     [t.marks.tolist() for t in analyze_all([s, s], runner=run)]
    [['normal', 'normal'], ['normal', 'normal']]
    """
    if method not in METHODS:  # before any task is sent
        raise ParameterError(f"unknown method {method!r} (must be one of {', '.join(METHODS)})")
    options = {"method": method, "window": window, "unit": unit, "sbps": sbps}
    if runner is None or isinstance(runner, InProcess):
        bounds = [(0, len(series))] if len(series) else []
        results = [_analyze_here(series, options, state)] if bounds else []
    else:
        bounds = [(a, b) for a, b in split_evenly(len(series), GROUPS_PER_SLOT * runner.width) if b > a]
        results = list(runner.map(_analyze_group, [_pack(series[a:b]) for a, b in bounds], **options))
    return _gather(series, method, bounds, results, on_error)


def _analyze_here(
    series: Sequence[Series], options: dict[str, Any], state: str | os.PathLike[str] | None
) -> _Trends:
    """All ``series`` as one group in this process, resuming and saving the programs in ``state``."""
    if state is None or options["method"] != "mdl":
        return _analyze_group(_pack(series), **options)
    from trend.state import load_programs, save_programs

    unit, sbps = options["unit"], options["sbps"]
    loaded = load_programs(state, unit=unit, sbps=sbps)
    prior = prior_of = None
    if loaded is not None:
        index, prior = loaded
        prior_of = np.array([index.get((s.test, s.testbed), -1) for s in series], np.int64)
    flat = _analyze_group(_pack(series), **options, prior=prior, prior_of=prior_of, keep_programs=True)
    if flat.programs is not None and flat.program_of is not None:
        keys = [(series[k].test, series[k].testbed) for k in np.flatnonzero(flat.program_of >= 0).tolist()]
        # A read-only store: the next analysis starts from nothing, as this one may have.
        with contextlib.suppress(OSError):
            save_programs(state, keys, flat.programs, unit=unit, sbps=sbps)
    return flat


def _gather(
    series: Sequence[Series],
    method: str,
    bounds: list[tuple[int, int]],
    results: Sequence[_Trends],
    on_error: Callable[[Series, ParameterError], None] | None,
) -> list[SeriesTrend]:
    """The groups' trends in series order; the first error raised, or each passed to ``on_error``."""
    out: list[SeriesTrend] = []
    for (start, stop), flat in zip(bounds, results, strict=True):
        for k in sorted(flat.errors):
            if on_error is None:
                raise flat.errors[k]
            on_error(series[start + k], flat.errors[k])
        out += _unpack_trends(series[start:stop], method, flat)
    return out


@dataclass(frozen=True)
class _Pack:
    """Series in a few flat arrays, as :func:`analyze_all` ships a group to a worker.

    A :class:`Series` holds one small array per run; a cluster's serializer handles every
    array as a frame of its own, and for thousands of them that costs more than the
    analysis (tens of milliseconds a series of 200 runs, measured). Flat, a group is a
    handful of frames. Each series' runs concatenate into ``times_ns`` and each run's trials into
    ``trials`` (so series of one group holding trials of different dtypes would share
    the promoted one; the store gives float64 throughout).
    """

    names: list[tuple[str, str, str, str]]  # test, testbed, unit, direction
    builds: list[tuple[str, ...]]
    runs: np.ndarray  # per series
    times_ns: np.ndarray
    trial_counts: np.ndarray  # per run
    trials: np.ndarray

    def one(self, k: int) -> Series:
        """Series ``k`` alone."""
        run_off = np.r_[0, np.cumsum(self.runs)]
        trial_off = np.r_[0, np.cumsum(self.trial_counts)]
        lo, hi = int(run_off[k]), int(run_off[k + 1])
        trials = tuple(self.trials[trial_off[i] : trial_off[i + 1]] for i in range(lo, hi))
        return Series(*self.names[k], self.builds[k], self.times_ns[lo:hi], trials)


def _pack(group: Sequence[Series]) -> _Pack:
    # A whole SeriesList as load_series made it (a slice of one is a plain list).
    flat = group.flat_runs() if hasattr(group, "flat_runs") else None
    if flat is not None:
        runs, times_ns, trial_counts, trials = flat
        return _Pack(
            names=[(s.test, s.testbed, s.unit, s.direction) for s in group],
            builds=[s.builds for s in group],
            runs=runs,
            times_ns=times_ns,
            trial_counts=trial_counts,
            trials=trials,
        )
    trials = [t for s in group for t in s.trials]
    return _Pack(
        names=[(s.test, s.testbed, s.unit, s.direction) for s in group],
        builds=[s.builds for s in group],
        runs=np.array([s.runs for s in group], dtype=np.int64),
        times_ns=np.concatenate([np.asarray(s.times_ns) for s in group]),
        trial_counts=np.array([len(t) for t in trials], dtype=np.int32),
        trials=np.concatenate(trials) if trials else np.empty(0),
    )


#: The marks a run can have, as the flat form codes them.
_MARKS = np.array(["failed", "normal", "regression", "progression", "outlier"], dtype=object)
_MARK_CODE = {m: np.uint8(k) for k, m in enumerate(_MARKS)}


@dataclass
class _Trends:
    """A group's trends, flat (as :class:`_Pack`): every run's value, trend and mark code
    (:data:`_MARKS`); per series its MDL groups and short- and long-term change, or its
    error (then its runs' fields mean nothing). With ``programs``, the MDL programs of the
    series ``program_of`` (per series its index there, -1 for none) as they ended."""

    values: np.ndarray
    trend: np.ndarray
    codes: np.ndarray
    groups: list[tuple[MdlGroup, ...]]
    changes: list[tuple[float | None, float | None]]
    errors: dict[int, ParameterError]
    programs: MdlPrograms | None = None
    program_of: np.ndarray | None = None


@dataclass(frozen=True)
class _Runs:
    """Per run of a pack: its trials that did not fail (``valid[start[r]:start[r] + count[r]]``),
    their mean (NaN for a failed run), and the statistics MDL groups it by."""

    count: np.ndarray
    start: np.ndarray
    valid: np.ndarray
    values: np.ndarray
    sizes: np.ndarray
    avg: np.ndarray
    sd: np.ndarray

    @classmethod
    def of(cls, pack: _Pack) -> _Runs:
        n_runs = pack.trial_counts.size
        run_of = np.repeat(np.arange(n_runs), pack.trial_counts)
        keep = ~np.isnan(pack.trials)
        valid = pack.trials[keep]
        count = np.bincount(run_of[keep], minlength=n_runs)
        start = np.cumsum(count) - count
        values = np.full(n_runs, np.nan)
        # A run of one trial enters MDL as a bare value (-0.0 as given); one of several as
        # its trials. Its mean, as numpy's sum starts from 0.0, is never -0.0.
        single = count == 1
        avg = values.copy()
        avg[single] = valid[start[single]]
        values[single] = avg[single] + 0.0
        sizes = count.astype(np.float64)
        sd = np.zeros(n_runs)
        multi = np.flatnonzero(count >= 2)
        if multi.size:
            width = int(count[multi].max())
            table = np.zeros((multi.size, width))
            row = np.repeat(np.arange(multi.size), count[multi])
            col = np.arange(row.size) - np.repeat(np.cumsum(count[multi]) - count[multi], count[multi])
            table[row, col] = valid[np.repeat(start[multi], count[multi]) + col]
            avg[multi], sd[multi] = trial_stats(table, count[multi])
            # The mean as Series.values takes it (numpy's sum: in order below 8 terms,
            # in eight running sums from 8 on, which only numpy's own sum repeats).
            total = table[:, 0] + 0.0
            for c in range(1, min(width, 8)):
                total += np.where(count[multi] > c, table[:, c], 0.0)
            for j in np.flatnonzero(count[multi] >= 8).tolist():
                total[j] = table[j, : count[multi][j]].sum()
            values[multi] = total / count[multi]
        return cls(count, start, valid, values, sizes, avg, sd)


def _analyze_group(
    pack: _Pack,
    *,
    method: str,
    window: int,
    unit: float | None,
    sbps: float | None,
    prior: MdlPrograms | None = None,
    prior_of: np.ndarray | None = None,
    keep_programs: bool = False,
) -> _Trends:
    """The trends of every series of a pack, flat: the runs' statistics for all series at
    once, and the MDL programs of all of them in one compiled pass
    (:class:`trend.mdl.MdlPrograms`), the same to the last bit as :func:`analyze_series`
    one series at a time. A series that cannot be analysed is analysed alone, so that its
    error is the one :func:`analyze_series` raises.

    With ``prior`` (programs of an earlier analysis) and ``prior_of`` (per series its
    index there, -1 for none), a series whose first runs are those the prior program saw
    (their statistics equal, the same largest value and unit) resumes it: only its new
    runs cost work. ``keep_programs`` returns the programs as they ended.
    """
    runs_per = pack.runs
    n_series = runs_per.size
    r = _Runs.of(pack)
    run_off = np.r_[0, np.cumsum(runs_per)].astype(np.int64)
    series_of_run = np.repeat(np.arange(n_series), runs_per)
    trial_series = np.repeat(series_of_run, pack.trial_counts)
    bad = np.zeros(n_series, bool)
    bad[trial_series[np.isinf(pack.trials) | (pack.trials < 0)]] = True
    n_runs = r.count.size
    trend = np.full(n_runs, np.nan)
    codes = np.zeros(n_runs, np.uint8)  # failed
    groups: list[tuple[MdlGroup, ...]] = [()] * n_series
    errors: dict[int, ParameterError] = {}
    has = r.count > 0
    # The largest valid trial of each series (0 for a series without any).
    top = np.zeros(n_series)
    if r.valid.size:
        np.maximum.at(top, np.repeat(series_of_run, r.count), r.valid)
    valid_runs = np.bincount(series_of_run[has], minlength=n_series)
    zero = ~bad & (valid_runs > 0) & (top == 0)

    def valid_runs_of(k: int) -> np.ndarray:
        return np.flatnonzero(has[run_off[k] : run_off[k + 1]]) + run_off[k]

    for k in np.flatnonzero(zero).tolist():  # nothing to group: jumpavg needs a positive maximum
        idx = valid_runs_of(k)
        trend[idx] = 0.0
        codes[idx] = _MARK_CODE["normal"]
        trials = int(r.count[idx].sum())
        groups[k] = (MdlGroup(0, int(idx.size), trials, 0.0, 0.0, "normal", float("nan")),)
    live = np.flatnonzero(~bad & (valid_runs > 0) & (top > 0))
    programs = program_of = None
    if method == "mdl":
        units = np.zeros(live.size)
        for j, k in enumerate(live.tolist()):
            try:
                units[j] = resolve_unit(float(top[k]), unit=unit, sbps=sbps)
            except ParameterError:
                bad[k] = True
        units, live = units[~bad[live]], live[~bad[live]]
        runs_of = np.flatnonzero(has & np.isin(series_of_run, live))
        offsets = np.r_[0, np.cumsum(valid_runs[live])].astype(np.int64)
        programs = MdlPrograms.new(offsets, r.sizes[runs_of], r.avg[runs_of], r.sd[runs_of], top[live], units)
        program_of = np.full(n_series, -1, np.int64)
        program_of[live] = np.arange(live.size)
        if prior is not None and prior_of is not None:
            here = program_of[prior_of >= 0]
            there = prior_of[prior_of >= 0]
            programs.resume(prior, here[here >= 0], there[here >= 0])
        programs.advance()
        for j, k in enumerate(live.tolist()):
            s_runs = runs_of[offsets[j] : offsets[j + 1]]
            try:
                result = programs.result(j, pack.names[k][3])
            except ParameterError:
                bad[k] = True
                continue
            trend[s_runs] = result.run_averages()
            codes[s_runs] = _MARK_CODE["normal"]
            for g in result.groups:
                codes[s_runs[g.start]] = _MARK_CODE[g.comment]
            groups[k] = result.groups
    else:
        for k in live.tolist():
            idx = valid_runs_of(k)
            try:
                result = classify_tmm(r.values[idx], window=window, direction=pack.names[k][3])
            except ParameterError:  # told below as analyze_series tells it
                bad[k] = True
                continue
            trend[idx] = result.tmm
            codes[idx] = [_MARK_CODE[m] for m in result.marks]
    changes: list[tuple[float | None, float | None]] = [(None, None)] * n_series
    for k in range(n_series):
        if bad[k]:
            try:  # alone, for the error analyze_series gives
                analyze_series(pack.one(k), method=method, window=window, unit=unit, sbps=sbps)
            except ParameterError as e:
                errors[k] = e
            continue
        lo, hi = run_off[k], run_off[k + 1]
        changes[k] = trend_compliance(pack.times_ns[lo:hi], trend[lo:hi], pack.names[k][3])
    kept = keep_programs and programs is not None
    return _Trends(
        r.values,
        trend,
        codes,
        groups,
        changes,
        errors,
        programs if kept else None,
        program_of if kept else None,
    )


def _unpack_trends(series: Sequence[Series], method: str, flat: _Trends) -> list[SeriesTrend]:
    """The :class:`SeriesTrend` of the group ``series`` but those in error, each with the
    caller's own series and arrays of its own, as in-process."""
    out = []
    at = 0
    for k, s in enumerate(series):
        end = at + s.runs
        if k not in flat.errors:
            marks = _MARKS[flat.codes[at:end]]
            short, long = flat.changes[k]
            out.append(
                SeriesTrend(
                    s,
                    method,
                    flat.values[at:end].copy(),
                    flat.trend[at:end].copy(),
                    marks,
                    flat.groups[k],
                    short,
                    long,
                )
            )
        at = end
    return out


def _analyze(series: Series, method: str, window: int, unit: float | None, sbps: float | None) -> SeriesTrend:
    bad = [b for b, t in zip(series.builds, series.trials, strict=True) if np.isinf(t).any() or (t < 0).any()]
    if bad:
        raise ParameterError(f"build {bad[0]!r} holds a value that is not a finite number >= 0")
    values = series.values
    valid = ~np.isnan(values)
    idx = np.flatnonzero(valid)
    trend = np.full(series.runs, np.nan)
    marks = np.full(series.runs, "failed", dtype=object)
    groups: tuple[MdlGroup, ...] = ()
    ok = values[valid]
    if ok.size and ok.max() == 0:  # nothing to group (jumpavg needs a positive maximum)
        trend[idx] = ok[0]
        marks[idx] = "normal"
        trials = sum(int((~np.isnan(series.trials[k])).sum()) for k in idx)
        groups = (MdlGroup(0, int(idx.size), trials, float(ok[0]), 0.0, "normal", float("nan")),)
    elif ok.size and method == "mdl":
        runs = []
        for k in idx:
            t = series.trials[k]
            t = t[~np.isnan(t)]
            runs.append(float(t[0]) if t.size == 1 else t.tolist())
        result = classify_mdl(runs, unit=unit, sbps=sbps, direction=series.direction)
        trend[idx] = result.run_averages()
        marks[idx] = result.run_marks()
        groups = result.groups
    elif ok.size:
        result = classify_tmm(ok, window=window, direction=series.direction)
        trend[idx] = result.tmm
        marks[idx] = result.marks
    short, long = trend_compliance(series.times_ns, trend, series.direction)
    return SeriesTrend(series, method, values, trend, marks, groups, short, long)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f} %"


def alert_text(trends: Sequence[SeriesTrend]) -> str:
    """A short Markdown alert naming the regressed tests, for mail or a CI comment.

    Examples
    --------
    >>> print(alert_text([]))
    ## wirepath trend: no regressions
    <BLANKLINE>
    0 series checked.
    """
    bad = [t for t in trends if t.regressed]
    if not bad:
        return f"## wirepath trend: no regressions\n\n{len(trends)} series checked."
    lines = [
        f"## wirepath trend: {len(bad)} regressed test{'s' if len(bad) != 1 else ''}",
        "",
        f"{len(bad)} of {len(trends)} series are in a regression at their newest run.",
        "",
        "| test | testbed | since build | trend | change vs previous | short-term | long-term |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in bad:
        s = t.series
        k = t.regression_start
        since = "?" if k is None else f"{s.builds[k]} ({(format_instant_ns(int(s.times_ns[k])) or '')[:10]})"
        before = t.trend[:k][~np.isnan(t.trend[:k])] if k else np.array([])
        change = None if before.size == 0 or before[-1] == 0 else (t.last_trend - before[-1]) / before[-1]
        lines.append(
            f"| {_cell(s.test)} | {_cell(s.testbed)} | {_cell(since)} | {t.last_trend:.6g} {_cell(s.unit)} "
            f"| {_pct(change)} | {_pct(t.short_change)} | {_pct(t.long_change)} |"
        )
    return "\n".join(lines)


#: What Markdown (CommonMark and GitHub's) would take for markup in a table cell: emphasis,
#: code, links and images, strikethrough, the column bar, and the backslash itself.
_MARKDOWN = re.compile(r"([\\`*_\[\]|~])")


def _cell(text: str) -> str:
    """A name as one Markdown table cell: shown, not obeyed, whether the alert is read as
    Markdown or as the HTML it becomes (a CI comment, mail): no line break, no extra
    column, no link, image, emphasis or HTML (``<script>``, ``<img onerror>``, ``<!--``).

    >>> _cell("<img src=x onerror=alert(1)>")
    '&lt;img src=x onerror=alert(1)&gt;'
    >>> _cell("[click](javascript:alert(1)) a|b *x*")
    '\\\\[click\\\\](javascript:alert(1)) a\\\\|b \\\\*x\\\\*'
    """
    return _MARKDOWN.sub(r"\\\1", html.escape(printable(text), quote=False))
