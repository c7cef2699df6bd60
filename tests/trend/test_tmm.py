"""Trimmed moving statistics (CSIT's older method) against values worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tracefmt import ParameterError
from trend import classify_tmm


def _by_hand(window_values: list[float]) -> tuple[float, float, float]:
    """Q1 - 1.5 IQR, TMM and TMSD of one window, the slow obvious way."""
    v = sorted(window_values)
    q1, q3 = np.percentile(v, 25), np.percentile(v, 75)
    low = q1 - 1.5 * (q3 - q1)
    kept = [x for x in v if x >= low]
    mean = sum(kept) / len(kept)
    sd = (sum((x - mean) ** 2 for x in kept) / (len(kept) - 1)) ** 0.5 if len(kept) > 1 else 0.0
    return low, float(np.median(kept)), sd


def test_matches_the_definition_run_by_run():
    rng = np.random.default_rng(5)
    values = (10e6 * (1 + rng.normal(0, 0.01, 60))).tolist()
    values[20] = 6e6  # a glitch: an outlier
    values[40:] = [v * 0.9 for v in values[40:]]  # a step down
    r = classify_tmm(values, window=14)
    for t in range(len(values)):
        _, tmm, tmsd = _by_hand(values[max(0, t - 13) : t + 1])
        assert r.tmm[t] == pytest.approx(tmm)
        assert r.tmsd[t] == pytest.approx(tmsd)
        if t < 3:
            assert r.marks[t] == "normal"
            continue
        low, ref, ref_sd = _by_hand(values[max(0, t - 14) : t])
        x = values[t]
        want = (
            "outlier"
            if x < low
            else "regression"
            if x < ref - 3 * ref_sd
            else "progression"
            if x > ref + 3 * ref_sd
            else "normal"
        )
        assert r.marks[t] == want, t
    assert r.marks[20] == "outlier"
    assert r.marks[40] in ("outlier", "regression")


def test_high_values_are_never_outliers_for_throughput():
    r = classify_tmm([10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 14.0])
    assert r.marks[-1] == "progression"


def test_latency_is_mirrored():
    # Bimodal history: IQR wide, trimmed deviation small, so both bands exist.
    lat = [12.0] * 4 + [10.0] * 6
    thr = [-x + 30.0 for x in lat]  # the same shape upside down, as throughput
    for x, want in ((14.0, "regression"), (16.0, "outlier"), (6.0, "progression"), (10.5, "normal")):
        assert classify_tmm([*lat, x], direction="smaller-is-better").marks[-1] == want
        assert classify_tmm([*thr, 30.0 - x]).marks[-1] == want


def test_one_sample_and_all_equal():
    assert classify_tmm([5.0]).marks.tolist() == ["normal"]
    r = classify_tmm([5.0] * 20)
    assert set(r.marks) == {"normal"}
    assert (r.tmm == 5.0).all()
    assert (r.tmsd == 0.0).all()


@pytest.mark.parametrize(
    ("values", "kwargs", "message"),
    [
        ([], {}, "empty series"),
        ([1.0, float("nan")], {}, "run 1 is NaN"),
        ([1.0, "x"], {}, "must be numbers"),
        ([1.0], {"window": 1}, "window must be an integer >= 2"),
        ([1.0], {"min_history": 20}, "min_history"),
        ([1.0], {"direction": "down"}, "bigger-is-better"),
    ],
    ids=["empty", "nan", "text", "window", "history", "direction"],
)
def test_bad_input(values, kwargs, message):
    with pytest.raises(ParameterError, match=message):
        classify_tmm(values, **kwargs)
