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
from trend.mdl import _prune_bound

# The reference vectors live beside the repository (../shared), as in CI; else at /work/shared.
SHARED = Path(__file__).resolve().parents[3] / "shared"
if not SHARED.is_dir():
    SHARED = Path("/work/shared")
VECTORS = SHARED / "data" / "trend" / "jumpavg_vectors.json"


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


def test_agrees_with_jumpavg_where_old_starts_are_pruned():
    # Four levels 100 runs each: starts before a shift become hopeless and are dropped.
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(v, v * 0.01, 100) for v in (1e6, 1.3e6, 0.9e6, 1.2e6)]).tolist()
    assert _ours(values) == _jumpavg(values)


def _group_bits(values, max_value, unit, prev):
    return jumpavg.BitCountingStats.for_runs_and_params(
        runs=values, max_value=max_value, unit=unit, prev_avg=prev
    ).bits


def test_prune_bound_holds_on_jumpavg_bits():
    """g(A) + g(C) - g(A + C) <= K for adversarial adjacent groups, by jumpavg's own bits."""
    rng = np.random.default_rng(11)
    worst = -math.inf
    for trial in range(1500):
        max_value = 8191.0 * [1.0, 0.37, 1000.0][trial % 3]
        unit = max_value / 8191.0
        shape = trial % 4
        na, nc = (int(x) for x in rng.integers(1, [4, 60][trial % 2], 2))
        if shape == 0:  # same level: the split only pays headers
            a = rng.normal(0.5, 0.01, na)
            c = rng.normal(0.5, 0.01, nc)
        elif shape == 1:  # extremes: 0s and maxima
            a = rng.choice([0.0, 1.0], na)
            c = rng.choice([0.0, 1.0], nc)
        elif shape == 2:  # one tight group, one spread group
            a = np.full(na, rng.random())
            c = rng.random(nc)
        else:
            a, c = rng.random(na), rng.random(nc)
        a = (np.clip(a, 0, 1) * max_value).tolist()
        c = (np.clip(c, 0, 1) * max_value).tolist()
        prev_a = None if trial % 5 == 0 else float(rng.random() * max_value)
        prev_c = float(rng.choice([0.0, max_value, rng.random() * max_value]))
        gap = (
            _group_bits(a, max_value, unit, prev_a)
            + _group_bits(c, max_value, unit, prev_c)
            - _group_bits(a + c, max_value, unit, prev_a)
        )
        worst = max(worst, gap - _prune_bound(max_value / unit, na + nc))
    # The adversarial corners: values at 0 and at the maximum, averages equal to the
    # previous ones (the dearest headers for a split that buys nothing).
    top = 8191.0
    level = {"zero": 0.0, "max": top, "half": top / 2}
    for na in (1, 2, 3, 10, 100):
        for nc in (1, 2, 3, 10, 100):
            for ka, kc in (("mix", "mix"), ("zero", "mix"), ("mix", "half"), ("max", "zero")):
                a = [0.0 if k % 2 else top for k in range(na)] if ka == "mix" else [level[ka]] * na
                c = [0.0 if k % 2 else top for k in range(nc)] if kc == "mix" else [level[kc]] * nc
                for prev_a in (None, 0.0, top, sum(a) / na):
                    for prev_c in (0.0, top, sum(c) / nc):
                        gap = (
                            _group_bits(a, top, 1.0, prev_a)
                            + _group_bits(c, top, 1.0, prev_c)
                            - _group_bits(a + c, top, 1.0, prev_a)
                        )
                        worst = max(worst, gap - _prune_bound(top, na + nc))
    assert worst < 0


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
