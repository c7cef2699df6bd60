"""MDL grouping against the real jumpavg 0.4.2: its recorded vectors and live on random series."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jumpavg
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tracefmt import ParameterError
from trend import classify_mdl

VECTORS = Path(__file__).resolve().parents[3] / "shared" / "data" / "trend" / "jumpavg_vectors.json"


def _vectors() -> dict:
    return json.loads(VECTORS.read_text())


def _jumpavg(values, **kwargs):
    """jumpavg's groups as (start, size, avg, stdev, comment, bits) and its total bits."""
    glist = jumpavg.classify(values, **kwargs)
    rows, start = [], 0
    for g in glist:
        rows.append((start, len(g), g.stats.avg, g.stats.stdev, g.comment, g.bits))
        start += len(g)
    return rows, glist.bits


def _ours(values, **kwargs):
    r = classify_mdl(values, **kwargs)
    return [(g.start, g.size, g.avg, g.stdev, g.comment, g.bits) for g in r.groups], r.total_bits


CASES = [c for c in _vectors()["cases"] if isinstance(c.get("jumpavg_0.4.2"), dict)]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_recorded_vectors_exactly(case):
    expected = case["jumpavg_0.4.2"]
    rows, total = _ours(case["values"], **case["kwargs"])
    want = [
        (g["start"], g["size"], g["avg"], g["stdev"], g["comment"], g["bits"]) for g in expected["groups"]
    ]
    assert rows == want
    assert total == expected["total_bits"]


def _series(rng: np.random.Generator, kind: int, n: int) -> list:
    if kind == 0:  # stationary MRR
        v = rng.normal(1e7, 1e5, n)
    elif kind == 1:  # one step down
        v = np.concatenate([rng.normal(1e7, 5e4, n // 2), rng.normal(9.7e6, 5e4, n - n // 2)])
    elif kind == 2:  # few distinct small integers: many near ties
        v = rng.integers(1, 5, n).astype(float)
    elif kind == 3:  # Mpps with coarse rounding
        v = rng.normal(10, 0.3, n).round(1)
    else:  # several levels
        v = np.repeat(rng.uniform(1e6, 2e6, 5), n // 5 + 1)[:n] + rng.normal(0, 2e4, n)
    return np.abs(v).tolist()


@pytest.mark.parametrize("kind", range(5), ids=["flat", "step", "ints", "mpps", "levels"])
def test_agrees_with_jumpavg_on_seeded_random_series(kind):
    rng = np.random.default_rng(100 + kind)
    for trial in range(12):
        values = _series(rng, kind, int(rng.integers(1, 80)))
        kwargs = [{}, {"unit": 0.5}, {"sbps": 8}][trial % 3]
        assert _ours(values, **kwargs) == _jumpavg(values, **kwargs), (values, kwargs)


def test_agrees_with_jumpavg_on_runs_of_trials():
    rng = np.random.default_rng(7)
    for _ in range(10):
        runs = [
            np.abs(rng.normal(level, level * 0.01, int(rng.integers(1, 6)))).tolist()
            for level in _series(rng, 4, int(rng.integers(2, 40)))
        ]
        runs[0] = runs[0][0]  # a bare value among runs
        assert _ours(runs) == _jumpavg(runs)


def test_agrees_with_jumpavg_on_a_long_series():
    values = _series(np.random.default_rng(3), 1, 400)
    assert _ours(values) == _jumpavg(values)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e9, allow_nan=False), min_size=1, max_size=30))
def test_agrees_with_jumpavg_on_any_small_series(values):
    # jumpavg divides by a unit of max / 8191, which underflows for subnormal maxima.
    assume(max(values) > 1e-300)
    assert _ours(values) == _jumpavg(values)


def test_direction_turns_comments_around_for_latency():
    values = [100.0, 104.0, 97.0, 101.0, 99.0, 103.0, 150.0, 148.0, 153.0, 149.0, 151.0, 152.0]
    assert [g.comment for g in jumpavg.classify(values)] == ["normal", "progression"]
    up = classify_mdl(values, direction="smaller-is-better")
    assert [g.comment for g in up.groups] == ["normal", "regression"]
    assert up.run_marks().tolist() == ["normal"] * 6 + ["regression"] + ["normal"] * 5
    assert up.run_averages().tolist() == [up.groups[0].avg] * 6 + [up.groups[1].avg] * 6


def test_one_sample_and_all_equal():
    (g,) = classify_mdl([7.0]).groups
    assert (g.start, g.size, g.avg, g.stdev, g.comment) == (0, 1, 7.0, 0.0, "normal")
    r = classify_mdl([3.0] * 50)
    assert len(r.groups) == 1
    assert r.groups[0].stdev == 0.0
    assert math.isfinite(r.total_bits)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([], "empty series"),
        ([1.0, [], 2.0], "run 1 has no values"),
        ([1.0, float("nan"), 2.0], "run 1 holds NaN"),
        ([1.0, 2.0, float("inf")], "run 2 holds NaN or infinity"),
        ([1.0, -2.0], "run 1 holds a negative value"),
        ([1.0, "fast"], "non-numeric"),
        ([0.0, 0.0], "every value is 0"),
    ],
    ids=["empty", "empty-run", "nan", "inf", "negative", "text", "zeros"],
)
def test_bad_input_is_one_clear_error(values, message):
    with pytest.raises(ParameterError, match=message):
        classify_mdl(values)


def test_unknown_direction_lists_the_allowed_ones():
    with pytest.raises(ParameterError, match="bigger-is-better, smaller-is-better"):
        classify_mdl([1.0], direction="up")
