"""Many series at once, and again after runs were added: the same trends as one series at a
time, to the last bit.

``analyze_all`` analyses a whole store in one pass (runs' statistics flat, every MDL
program compiled in one call) and, with a state file, resumes the programs the last
analysis saved. Both are checked here against :func:`analyze_series` (itself checked
against jumpavg in test_mdl.py) on random stores: failed trials and runs, ties, level
shifts, all-zero series, runs of one trial and of many (eight and more, where numpy sums
in eight running sums), and stores changed between analyses.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tracefmt import ParameterError
from trend import Series, analyze_series
from trend.analysis import analyze_all
from trend.mdl import MdlPrograms, classify_mdl
from trend.state import load_programs, save_programs

DAY = 86_400 * 10**9


def _series(rng: np.random.Generator, k: int, runs: int | None = None) -> Series:
    runs = int(rng.integers(1, 90)) if runs is None else runs
    level = float(rng.choice([1.0, 250.0, 1.2e7]))
    x = level * (1 + rng.normal(0, 0.01, runs))
    if k % 3 == 0:
        x[int(rng.integers(0, runs)) :] *= 0.94
    if k % 7 == 0:
        x = np.round(x / level * 20) / 20 * level  # ties
    if k % 11 == 0:
        x[:] = 0.0
    trials = []
    for v in x:
        n = int(rng.choice([1, 1, 2, 3, 9])) if k % 2 else 1
        t = v * (1 + rng.normal(0, 0.004, n)) if v else np.zeros(n)
        t[rng.random(n) < 0.05] = np.nan  # failed trials, now and then a failed run
        trials.append(t)
    times = np.sort(rng.choice(400, runs, replace=False)) * DAY
    direction = "smaller-is-better" if k % 5 == 0 else "bigger-is-better"
    return Series(
        f"t{k}", "tb", "pps", direction, tuple(f"b{i:03d}" for i in range(runs)), times, tuple(trials)
    )


def _store(seed: int, count: int = 150) -> list[Series]:
    rng = np.random.default_rng(seed)
    return [_series(rng, k) for k in range(count)]


def _same(a, b) -> None:
    assert a.series is b.series or a.series.builds == b.series.builds
    np.testing.assert_array_equal(a.values, b.values)
    np.testing.assert_array_equal(a.trend, b.trend)
    assert a.marks.tolist() == b.marks.tolist()
    assert [g.to_json() for g in a.groups] == [g.to_json() for g in b.groups]  # bits NaN: None
    assert (a.short_change, a.long_change) == (b.short_change, b.long_change)


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("method", ["mdl", "tmm"])
def test_a_store_at_once_is_each_series_alone(seed, method):
    store = _store(seed)
    together = analyze_all(store, method=method)
    assert len(together) == len(store)
    for t, s in zip(together, store, strict=True):
        _same(t, analyze_series(s, method=method))


def test_runs_of_many_trials_average_as_numpy_sums_them():
    # Nine trials: numpy's sum runs eight partial sums, not one; the flat pass must agree.
    rng = np.random.default_rng(5)
    trials = tuple(1e7 * (1 + rng.normal(0, 0.01, 9 + k % 4)) for k in range(40))
    s = Series("t", "tb", "pps", "bigger-is-better", tuple(map(str, range(40))), np.arange(40) * DAY, trials)
    np.testing.assert_array_equal(analyze_all([s])[0].values, s.values)
    assert analyze_all([s])[0].groups == analyze_series(s).groups


def test_programs_match_classify_mdl_on_random_series():
    rng = np.random.default_rng(7)
    series = []
    for k in range(300):
        n = int(rng.integers(1, 200))
        x = rng.choice([1.0, 1e7]) * (1 + rng.normal(0, 0.01, n))
        x[int(rng.integers(0, n)) :] *= 1.05 if k % 2 else 1.0
        series.append([float(v) if k % 3 else (v * (1 + rng.normal(0, 0.003, 2))).tolist() for v in x])
    p = MdlPrograms.of(series)
    p.advance()
    for k, values in enumerate(series):
        assert p.result(k).groups == classify_mdl(values).groups


def _grown(store: list[Series], rng: np.random.Generator) -> list[Series]:
    """The store a few builds later: up to three runs added to each series (a little below
    its level, now and then with a failed trial), one series' middle build reimported
    with another value, one given a new largest value, and one new series."""
    out = []
    for k, s in enumerate(store):
        level = float(np.nan_to_num(np.nanmedian(s.values))) if np.isfinite(s.values).any() else 0.0
        added = []
        for _ in range(int(rng.integers(0, 4))):
            t = level * 0.98 * (1 + rng.normal(0, 0.002, int(rng.integers(1, 4))))
            t[rng.random(t.size) < 0.05] = np.nan
            added.append(t)
        times = np.r_[s.times_ns, s.times_ns[-1] + (np.arange(len(added)) + 1) * DAY]
        builds = s.builds + tuple(f"c{i:03d}" for i in range(len(added)))
        trials = s.trials + tuple(added)
        if k == 4:
            trials = (trials[0], trials[1] * 0.9, *trials[2:])  # below the maximum
        if k == 8:
            trials, times, builds = (
                (*trials, np.array([1000000000.0])),
                np.r_[times, times[-1] + DAY],
                (*builds, "big"),
            )
        out.append(dataclasses.replace(s, builds=builds, times_ns=times, trials=trials))
    out.append(_series(rng, 999))
    return out


def test_an_analysis_resumed_from_the_saved_programs_is_one_from_nothing(tmp_path, monkeypatch):
    rng = np.random.default_rng(11)
    before = _store(11, 120)
    after = _grown(before, rng)
    state = tmp_path / "state" / "trend-mdl.npz"
    analyze_all(before, state=state)
    assert state.exists()
    grafted: list[int] = []
    graft = MdlPrograms.graft
    monkeypatch.setattr(
        MdlPrograms,
        "graft",
        lambda self, into, source, take: (grafted.extend(into), graft(self, into, source, take)),
    )
    resumed = analyze_all(after, state=state)
    fresh = analyze_all(after)
    for r, f, s in zip(resumed, fresh, after, strict=True):
        _same(r, f)
        _same(r, analyze_series(s))
    # Most series resumed; the one reimported in the middle, the one with a new maximum
    # and the new one did not.
    assert len(grafted) > len(before) // 2
    keys, _ = load_programs(state, unit=None, sbps=None)
    names = [t for t, _ in sorted(keys, key=keys.get)]
    assert {names[i] for i in grafted}.isdisjoint({"t4", "t8", "t999"})


def test_other_options_or_a_damaged_state_start_afresh(tmp_path):
    store = _store(13, 60)
    state = tmp_path / "s.npz"
    expected = analyze_all(store)
    analyze_all(store, state=state, sbps=12)
    assert load_programs(state, unit=None, sbps=None) is None  # counted with other options
    for t, e in zip(analyze_all(store, state=state), expected, strict=True):
        _same(t, e)
    data = state.read_bytes()
    state.write_bytes(data[: len(data) // 2])  # a torn file
    assert load_programs(state, unit=None, sbps=None) is None
    for t, e in zip(analyze_all(store, state=state), expected, strict=True):
        _same(t, e)
    # A file whose arrays do not fit together is not used either.
    keys, programs = load_programs(state, unit=None, sbps=None)
    bad = dataclasses.replace(programs, lo=programs.lo + 10**6)
    save_programs(state, sorted(keys, key=keys.get), bad, unit=None, sbps=None)
    assert load_programs(state, unit=None, sbps=None) is None


def test_a_bad_series_is_reported_as_alone_and_the_others_analysed():
    store = _store(17, 30)
    broken = dataclasses.replace(store[6], trials=(*store[6].trials[:-1], np.array([math.inf])))
    store[6] = broken
    with pytest.raises(ParameterError) as alone:
        analyze_series(broken)
    with pytest.raises(ParameterError) as together:
        analyze_all(store)
    assert str(together.value) == str(alone.value)
    errors = []
    trends = analyze_all(store, on_error=lambda s, e: errors.append((s.test, str(e))))
    assert errors == [("t6", str(alone.value))]
    assert [t.series.test for t in trends] == [s.test for s in store if s.test != "t6"]


def test_the_cli_keeps_its_programs_in_the_store_and_says_the_same(tmp_path, capsys):
    from wirepath.cli import main

    samples = __import__("pathlib").Path(__file__).resolve().parents[2] / "samples" / "trend"
    store = tmp_path / "store"
    assert main(["trend", "import", str(samples / "mrr.csv"), "--store", str(store)]) == 0
    capsys.readouterr()
    outputs = []
    for extra in ([], [], ["--fresh"]):
        main(["trend", "analyze", "--store", str(store), "--json", *extra])
        outputs.append(capsys.readouterr().out)
        assert (store / "state" / "trend-mdl.npz").is_file()
    assert outputs[0] == outputs[1] == outputs[2]
    assert '"series"' in outputs[0]


def test_an_analysis_of_some_tests_leaves_the_saved_programs_alone(tmp_path, capsys):
    from wirepath.cli import main

    samples = __import__("pathlib").Path(__file__).resolve().parents[2] / "samples" / "trend"
    store = tmp_path / "store"
    assert main(["trend", "import", str(samples / "mrr.csv"), "--store", str(store)]) == 0
    assert main(["trend", "analyze", "--store", str(store)]) == 0
    saved = (store / "state" / "trend-mdl.npz").read_bytes()
    assert main(["trend", "analyze", "--store", str(store), "--test", "ip4base"]) == 0
    assert (store / "state" / "trend-mdl.npz").read_bytes() == saved
    keys, _ = load_programs(store / "state" / "trend-mdl.npz", unit=None, sbps=None)
    assert len(keys) == 4  # every series of the store, not the one analysed last


def test_negative_zero_trials_average_as_numpy_averages_them():
    # -0.0 passes as a value >= 0; numpy's mean of it is 0.0, whatever the trial count.
    s = Series("t", "tb", "pps", "bigger-is-better", ("b0", "b1", "b2"), np.arange(3) * DAY,
               (np.array([-0.0, -0.0]), np.array([-0.0]), np.array([0.0])))  # fmt: skip
    together, alone = analyze_all([s])[0], analyze_series(s)
    assert together.to_json() == alone.to_json()
    assert [math.copysign(1, v) for v in together.values] == [1.0, 1.0, 1.0]


def test_a_store_list_changed_in_place_is_analysed_as_it_now_is(tmp_path):
    from tracefmt import Store
    from trend.series import load_series, results_table, write_results

    store = Store.create(tmp_path / "store")
    rows = [{"test": "a", "build": f"b{i}", "time": i, "value": v} for i, v in enumerate([10.0, 10.0, 5.0])]
    rows += [
        {"test": "b", "build": f"b{i}", "time": i, "value": v} for i, v in enumerate([1.0, 1.0, 1.0, 2.0])
    ]
    write_results(store, results_table(rows))
    for change in (list.reverse, lambda s: s.pop(0), lambda s: s.__setitem__(0, s[1])):
        series = load_series(store)
        change(series)
        for t in analyze_all(series):
            _same(t, analyze_series(t.series))


def test_a_tmm_error_is_told_as_one_series_alone_tells_it():
    s = Series("t", "tb", "pps", "bigger-is-better", ("b0", "b1", "b2"), np.arange(3) * DAY,
               tuple(np.array([v]) for v in (1.0, 2.0, 1.0)))  # fmt: skip
    with pytest.raises(ParameterError) as alone:
        analyze_series(s, method="tmm", window=0)
    errors = []
    assert analyze_all([s], method="tmm", window=0, on_error=lambda x, e: errors.append(str(e))) == []
    assert errors == [str(alone.value)]


def test_a_run_whose_deviation_overflows_is_grouped_as_jumpavg_groups_it():
    jumpavg = pytest.importorskip("jumpavg")
    values = [[2e154], 1e153, 1e153, 1e153, 1e153]  # 2e154 squared overflows: a NaN deviation
    want = [len(g) for g in jumpavg.classify(values)]
    assert [g.size for g in classify_mdl(values).groups] == want == [1, 4]
    p = MdlPrograms.of([values])
    p.advance()
    assert [g.size for g in p.result(0).groups] == want
