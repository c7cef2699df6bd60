"""``trend from-paths`` against ground truth: synthetic runs with known delays, inferred,
imported with and without the instances table, analysed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import infer
import synth
import trend
from tracefmt.patterns import text_id
from trend.paths import NAME_TEXT, batch_means, path_series
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
DAY_NS = 86_400 * 10**9


def _config(name: str, **overrides):
    return synth.load_config(ROOT / "samples" / "synth" / f"{name}.toml").with_overrides(**overrides)


def _slower(config, node: str, delay_s: float):
    """``config`` with ``delay_s`` more before every call to ``node`` answers."""

    def call(c):
        if node not in c.to:
            return c
        d = c.before.for_node(node)
        shifted = synth.Delay(tuple((m + delay_s, s, w) for m, s, w in d.components))
        return dataclasses.replace(
            c, before=synth.NodeDelay(c.before.default, {**c.before.by_node, node: shifted})
        )

    return dataclasses.replace(
        config,
        tracelets=tuple(dataclasses.replace(t, calls=tuple(map(call, t.calls))) for t in config.tracelets),
    )


def _run(config, out: Path, k: int) -> tuple[Path, Path]:
    """Run ``k`` of ``config`` (its own seed and day) inferred: its paths file and instances table."""
    trace, _ = synth.generate_table(
        config.with_overrides(seed=500 + k, start_ns=config.start_ns + k * DAY_NS)
    )
    result = infer.infer_nesting(trace)
    paths, inst = out / f"run{k}.json", out / f"run{k}.parquet"
    paths.write_text(json.dumps(result.to_json()))
    result.write_instances(inst)
    return paths, inst


@pytest.fixture(scope="module")
def multitier(tmp_path_factory):
    """Nine runs of the multitier system (about 50 requests a pattern each): six unchanged,
    then three with every call to DB2 3 ms slower."""
    out = tmp_path_factory.mktemp("multitier")
    base = _config("multitier", messages=6_000, parallelism=2)
    slow = _slower(base, "DB2", 0.003)
    return [_run(base if k < 6 else slow, out, k) for k in range(9)]


@pytest.fixture(scope="module")
def fanout(tmp_path_factory):
    """A run of the gateway whose calls fan out at once (concurrent groups)."""
    return _run(_config("gateway-fanout", messages=8_000), tmp_path_factory.mktemp("fanout"), 0)


def _import(store: Path, paths: Path, build: str, *extra: str) -> None:
    assert main(["trend", "from-paths", str(paths), "--store", str(store), "--build", build, *extra]) == 0


def _tag(series_tags: list[str], key: str) -> str | None:
    return next((t.split(":", 1)[1] for t in series_tags if t.startswith(f"{key}:")), None)


def _stored(store: Path) -> dict[str, tuple[str, str | None, np.ndarray]]:
    """Per series name: its pattern id, its place and its trials (one run)."""
    t = trend.load_series(store)
    raw = pa.concat_tables(pq.read_table(p) for p in sorted((store / "results").glob("*.parquet")))
    tags = dict(zip(raw.column("test").to_pylist(), raw.column("tags").to_pylist(), strict=True))
    return {s.test: (_tag(tags[s.test], "pattern"), _tag(tags[s.test], "at"), s.trials[0]) for s in t}


@pytest.mark.parametrize("which", ["multitier", "fanout"])
def test_per_request_trials_are_the_instances_own_latencies(which, request, tmp_path, capsys):
    run = request.getfixturevalue(which)
    paths, inst = run[0] if which == "multitier" else run
    _import(tmp_path, paths, "1", "--instances", str(inst), "--min-count", "1", "--trials", "all")
    assert "from" in capsys.readouterr().out
    stored = _stored(tmp_path)
    doc = json.loads(paths.read_text())
    # Ground truth from the table alone (plain numpy): an instance's root call has no
    # parent, its latency is return - call, its pattern is named in the row.
    table = pq.read_table(inst)
    root = ~table.column("parent").is_valid().to_numpy(zero_copy_only=False)
    t_call = table.column("t_call").cast(pa.int64()).to_numpy()[root]
    lat = (table.column("t_return").cast(pa.int64()).to_numpy()[root] - t_call) * 1e-9
    pattern = np.array(table.column("pattern").cast(pa.string()).to_pylist())[root]
    roots = {pid: trials for pid, at, trials in stored.values() if at is None}
    assert set(roots) == {p["id"] for p in doc["patterns"]}
    for pid, trials in roots.items():
        mine = pattern == pid
        want = lat[mine][np.argsort(t_call[mine], kind="stable")]
        np.testing.assert_array_equal(trials, want)
    # Every visit: as many trials as its pattern's instances, their mean the paths file's.
    series = path_series(doc)
    by_name = {n: k for k, n in enumerate(series.names)}
    assert set(stored) == set(series.names)
    for name, (_, _, trials) in stored.items():
        k = by_name[name]
        assert trials.size == series.count[k]
        assert trials.mean() == pytest.approx(series.latency_s[k], rel=1e-12)


def test_first_level_visits_by_call_order(multitier, tmp_path, capsys):
    """A root's k-th child by call time is the visit at place k (multitier's visits are
    called one after the other), computed from the table with numpy alone."""
    paths, inst = multitier[0]
    _import(tmp_path, paths, "1", "--instances", str(inst), "--min-count", "1", "--trials", "all")
    stored = _stored(tmp_path)
    table = pq.read_table(inst)
    pair = table.column("pair").to_numpy()
    parent = table.column("parent").fill_null(-1).to_numpy()
    t_call = table.column("t_call").cast(pa.int64()).to_numpy()
    lat = (table.column("t_return").cast(pa.int64()).to_numpy() - t_call) * 1e-9
    pattern = np.array(table.column("pattern").cast(pa.string()).to_pylist())
    is_root = np.isin(parent, -1)
    kid = np.isin(parent, pair[is_root])
    kids = np.flatnonzero(kid)
    kids = kids[np.lexsort((t_call[kids], parent[kids]))]
    first = np.r_[True, parent[kids][1:] != parent[kids][:-1]]
    place = np.arange(kids.size) - np.maximum.accumulate(np.where(first, np.arange(kids.size), 0))
    checked = 0
    for name, (pid, at, trials) in stored.items():
        if at is None or "/" in at or "|" in name:  # a concurrent group is in text order
            continue
        mine = kids[(pattern[kids] == pid) & (place == int(at))]
        want = lat[mine][np.argsort(t_call[mine], kind="stable")]
        np.testing.assert_array_equal(trials, want, err_msg=name)
        checked += 1
    assert checked >= 16


def test_names_are_shapes_stable_between_seeds(multitier):
    docs = [json.loads(p.read_text()) for p, _ in multitier[:2]]
    series = [path_series(d) for d in docs]
    roots = [{s.pattern_ids[r]: s.names[r] for r in s.roots.tolist()} for s in series]
    common = set(roots[0]) & set(roots[1])
    assert len(common) >= 16  # the 16 true patterns at least
    for pid in common:
        assert roots[0][pid] == roots[1][pid]
        # The name is the shape text, whose id is the pattern's (no operations here).
        assert text_id(roots[0][pid].removeprefix("path:")) == pid
    for s in series:
        assert len(set(s.names)) == len(s.names)
    steady = {n for n, c in zip(series[0].names, series[0].count, strict=True) if c >= 20}
    assert steady <= set(series[1].names)
    assert "path:client>WS1(WS1>AP1(AP1>DB2))/AP1>DB2" in steady


def _analysis(store: Path, capsys) -> dict[str, dict]:
    capsys.readouterr()
    assert main(["trend", "analyze", "--store", str(store), "--json"]) == 0
    return {s["test"]: s for s in json.loads(capsys.readouterr().out)["series"]}


@pytest.mark.parametrize("trials", ["all", None], ids=["per-request", "batches by default"])
def test_unchanged_runs_give_no_regression_and_a_delay_is_found(multitier, tmp_path, capsys, trials):
    extra = [] if trials is None else ["--trials", trials]
    for k, (paths, inst) in enumerate(multitier[:6]):
        _import(tmp_path, paths, f"r{k}", "--instances", str(inst), *extra)
    unchanged = _analysis(tmp_path, capsys)
    assert len(unchanged) >= 40
    assert [t for t, s in unchanged.items() if s["regressed"]] == []
    for k, (paths, inst) in enumerate(multitier[6:], 6):
        _import(tmp_path, paths, f"r{k}", "--instances", str(inst), *extra)
    changed = _analysis(tmp_path, capsys)
    touched = {t for t in changed if "DB2" in t}
    regressed = {t for t, s in changed.items() if s["regressed"]}
    # Every DB2 visit (3 ms on about 10) is found, and nothing that does not hold one.
    db2 = {t for t in changed if t.endswith(">DB2") and len(changed[t]["runs"]) == 9}
    assert len(db2) >= 8
    assert db2 <= regressed
    assert regressed <= touched


def test_without_instances_a_run_is_one_sample_and_it_says_so(multitier, tmp_path, capsys):
    paths, inst = multitier[0]
    _import(tmp_path / "a", paths, "1")
    out = capsys.readouterr().out
    assert "each run is one sample" in out
    assert "give --instances" in out
    assert "patterns seen fewer than 5 times in the run left out" in out
    _import(tmp_path / "b", paths, "1", "--instances", str(inst), "--trials", "all")
    mean, each = trend.load_series(tmp_path / "a"), trend.load_series(tmp_path / "b")
    # With --instances and no --trials: ten batches of requests a run at most.
    _import(tmp_path / "d", paths, "1", "--instances", str(inst))
    batched = trend.load_series(tmp_path / "d")
    assert max(s.trials[0].size for s in batched) == 10
    assert max(s.trials[0].size for s in each) > 10
    assert [s.test for s in mean] == [s.test for s in each]  # the same series either way
    assert {s.trials[0].size for s in mean} == {1}
    np.testing.assert_allclose([s.values[0] for s in mean], [s.values[0] for s in each], rtol=1e-12)
    assert (
        main(
            [
                "trend",
                "from-paths",
                str(paths),
                "--store",
                str(tmp_path / "c"),
                "--build",
                "1",
                "--trials",
                "5",
            ]
        )
        == 1
    )
    assert "--trials goes with --instances" in capsys.readouterr().err


def test_an_instances_table_of_another_system_is_refused(multitier, fanout, tmp_path, capsys):
    assert main(
        ["trend", "from-paths", str(multitier[0][0]), "--instances", str(fanout[1]),
         "--store", str(tmp_path), "--build", "1"]
    ) == 1  # fmt: skip
    assert "none of its" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_batch_means_against_plain_numpy():
    rng = np.random.default_rng(3)
    counts = np.array([1, 9, 10, 11, 250])
    visit = np.repeat(np.arange(counts.size), counts)
    values = rng.random(visit.size)
    v, x = batch_means(visit, values, 10)
    for k, c in enumerate(counts):
        mine = values[visit == k]
        want = [b.mean() for b in np.array_split(mine, min(c, 10))] if c > 10 else mine.tolist()
        if c > 10:  # nearly equal consecutive batches: sizes differ by at most one
            sizes = np.bincount(np.arange(c) * 10 // c)
            want = [b.mean() for b in np.split(mine, np.cumsum(sizes)[:-1])]
            assert sizes.max() - sizes.min() <= 1
        np.testing.assert_allclose(x[v == k], want)


def _visit(node, caller, children=(), ops=None, **extra):
    out = {"node": node, "caller": caller, "latency_s": {"mean": 0.001}, "children": list(children), **extra}
    if ops:
        out["ops"] = [{"op": op, "share": share} for op, share in ops]
    return out


def test_names_carry_a_dominant_operation_and_number_repeated_calls():
    root = _visit(
        "nginx",
        "client",
        [
            _visit("db", "nginx", ops=[("SELECT", 1.0)]),
            _visit("db", "nginx", ops=[("SELECT", 0.5), ("UPDATE", 0.5)]),
        ],
        ops=[("GET /item/:id", 0.95), ("GET /user/:id", 0.05)],
    )
    names = path_series({"patterns": [{"id": "p", "count": 9, "root": root}]}).names
    assert names == [
        "path:client>nginx[GET /item/:id](nginx>db,nginx>db)",
        "path:client>nginx[GET /item/:id](nginx>db,nginx>db)/nginx>db[SELECT]",
        "path:client>nginx[GET /item/:id](nginx>db,nginx>db)/nginx>db",  # no dominant operation
    ]
    same = _visit("nginx", "client", [_visit("db", "nginx"), _visit("db", "nginx")])
    names = path_series({"patterns": [{"id": "q", "count": 9, "root": same}]}, prefix="lat/").names
    assert names[1:] == [
        "lat/client>nginx(nginx>db,nginx>db)/nginx>db",
        "lat/client>nginx(nginx>db,nginx>db)/nginx>db#2",
    ]


def test_a_long_shape_is_cut_after_its_root_with_the_pattern_id():
    chain = _visit("n200", "n199")
    for k in range(199, 0, -1):
        chain = _visit(f"n{k}", f"n{k - 1}", [chain])
    (name, *_) = path_series({"patterns": [{"id": "abc", "count": 9, "root": chain}]}).names
    assert name == "path:n0>n1(... 199 visits) abc"
    assert len(name) < NAME_TEXT


@pytest.mark.browser
def test_the_dashboard_of_path_series_says_nothing_of_cores(multitier, tmp_path, open_page, capsys):
    for k, (paths, inst) in enumerate(multitier[:3]):
        _import(tmp_path / "store", paths, f"r{k}", "--instances", str(inst), "--trials", "10")
    assert (
        main(["trend", "dashboard", "--store", str(tmp_path / "store"), "--out", str(tmp_path / "site")]) == 0
    )
    page = open_page(tmp_path / "site" / "index.html")
    d = page.driver
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 10).until(lambda drv: drv.execute_script("return document.body.dataset.ready") == "1")
    assert page.console_errors() == []
    text = d.find_element("tag name", "body").text
    assert "core" not in text.lower()
    assert not d.find_element("id", "cores").is_displayed()
    headings = [h.text for h in d.find_elements("css selector", "#series th") if h.is_displayed()]
    assert headings[:3] == ["test", "testbed", "trend"]
    first = d.find_element("css selector", "#series tbody td a").text
    assert first.startswith("path:client>WS")
