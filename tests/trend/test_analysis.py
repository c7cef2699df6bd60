"""Series analysis: marks stay on their runs, compliance, the alert and check semantics."""

from __future__ import annotations

import json
from pathlib import Path

import jumpavg
import numpy as np
import pytest

from tracefmt import ParameterError
from trend import Series, alert_text, analyze_series, trend_compliance

# The reference vectors live beside the repository (../shared), as in CI; else at /work/shared.
SHARED = Path(__file__).resolve().parents[3] / "shared"
if not SHARED.is_dir():
    SHARED = Path("/work/shared")
VECTORS = SHARED / "data" / "trend" / "jumpavg_vectors.json"
DAY = 86_400 * 10**9


def _series(values, *, direction="bigger-is-better", days=None, trials=None):
    n = len(values)
    times = np.arange(n) * DAY if days is None else np.asarray(days) * DAY
    runs = trials or [np.array([v], dtype=float) for v in values]
    builds = tuple(f"b{k}" for k in range(n))
    return Series("t", "tb", "pps", direction, builds, times.astype(np.int64), tuple(runs))


def test_a_failed_run_keeps_every_other_mark_in_place():
    case = next(c for c in json.loads(VECTORS.read_text())["cases"] if "cdash" in c["name"])
    values = [float("nan") if v == "NaN" else v for v in case["values"]]
    r = analyze_series(_series(values))
    valid = [v for v in values if v == v]
    ref = jumpavg.classify(valid)
    want_marks, want_avgs = [], []
    for g in ref:
        want_marks += [g.comment] + ["normal"] * (len(g) - 1)
        want_avgs += [g.stats.avg] * len(g)
    bad = next(k for k, v in enumerate(values) if v != v)
    assert r.marks[bad] == "failed"
    assert np.isnan(r.trend[bad])
    assert np.delete(r.marks, bad).tolist() == want_marks
    assert np.delete(r.trend, bad).tolist() == want_avgs
    # CSIT's dashboard shifts marks (its recorded classification); ours must not.
    assert r.marks.tolist() != case["cdash_classification"]


def test_runs_of_trials_are_undivisible_units_as_in_jumpavg():
    rng = np.random.default_rng(2)
    trials = [rng.normal(10e6 if k < 8 else 9.5e6, 4e4, 5) for k in range(14)]
    trials[3][1] = np.nan  # one failed trial: the run keeps its other four
    r = analyze_series(_series([0.0] * 14, trials=trials))
    ref = jumpavg.classify([t[~np.isnan(t)].tolist() for t in trials])
    assert [g.comment for g in r.groups] == [g.comment for g in ref]
    assert [g.avg for g in r.groups] == [g.stats.avg for g in ref]


def test_latency_rise_is_a_regression_and_check_sees_it():
    values = [0.020, 0.0201, 0.0199, 0.0202, 0.0200, 0.0198, 0.0240, 0.0241, 0.0239]
    r = analyze_series(_series(values, direction="smaller-is-better"))
    assert r.regressed
    assert r.marks.tolist()[6] == "regression"
    assert r.runs_in_last_group == 3
    text = alert_text([r])
    assert "| t | tb | b6 (1970-01-07)" in text
    assert "+20" in text  # the change against the group before


def test_all_equal_zero_and_single_values():
    zeros = analyze_series(_series([0.0, 0.0, 0.0]))
    assert zeros.marks.tolist() == ["normal"] * 3
    assert not zeros.regressed
    assert json.dumps(zeros.to_json(), allow_nan=False)
    fives = analyze_series(_series([5.0] * 4))
    (ref,) = jumpavg.classify([5.0] * 4)
    assert [(g.size, g.avg, g.bits) for g in fives.groups] == [(4, 5.0, ref.bits)]
    one = analyze_series(_series([7.0]), method="tmm")
    assert one.marks.tolist() == ["normal"]
    assert one.last_trend == 7.0
    everything_failed = analyze_series(_series([float("nan")] * 2))
    assert everything_failed.marks.tolist() == ["failed", "failed"]
    assert everything_failed.last_trend is None
    assert (everything_failed.short_change, everything_failed.long_change) == (None, None)


def test_compliance_by_definition():
    days = np.array([0, 10, 20, 60, 83, 90, 93, 100])
    trend = np.array([5.0, 8.0, 12.0, 11.0, 10.0, 10.0, 10.0, 9.0])
    short, long = trend_compliance(days * DAY, trend)
    assert short == pytest.approx((9 - 10) / 10)  # day 93 is exactly one week before
    assert long == pytest.approx((9 - 12) / 12)  # best of days 10..93; day 0 is older than a quarter
    _, long_l = trend_compliance(days * DAY, trend, "smaller-is-better")
    assert long_l == pytest.approx((9 - 8) / 8)  # the best latency is the lowest (day 10)


def test_compliance_without_history():
    assert trend_compliance(np.array([0, DAY]), np.array([1.0, 2.0])) == (None, None)


def test_no_regressions_alert_and_unknown_method():
    r = analyze_series(_series([10.0, 10.1, 9.9, 10.0]))
    assert alert_text([r]).startswith("## wirepath trend: no regressions")
    with pytest.raises(ParameterError, match="mdl, tmm"):
        analyze_series(_series([1.0]), method="iqr")


def test_unit_and_sbps_reach_the_grouping():
    rng = np.random.default_rng(8)
    values = (10.0 + rng.normal(0, 0.05, 30) + np.r_[np.zeros(15), np.full(15, 0.2)]).tolist()
    # A 2 % step: found at the default resolution, not with a coarse unit or few bits.
    for kwargs, groups in (({"unit": 0.5}, 1), ({"sbps": 4}, 1), ({}, 2)):
        r = analyze_series(_series(values), **kwargs)
        ref = jumpavg.classify(values, **kwargs)
        assert [(g.size, g.avg) for g in r.groups] == [(len(g), g.stats.avg) for g in ref]
        assert len(r.groups) == groups
