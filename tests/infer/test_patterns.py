"""Patterns and the paths file: ``infer.patterns`` and ``NestingResult`` output."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infer import group_stats, infer_nesting, latency_stats
from tracefmt.patterns import Shape, pattern_id

MS = 1_000_000
STAT_KEYS = {"mean", "p50", "p90", "p99", "std"}


def iso_to_ns(text: str) -> int:
    """Nanoseconds since the epoch of an ISO-8601 UTC instant with up to 9 decimals."""
    assert text.endswith("Z") or text.endswith("+00:00"), text
    body = text[:-1] if text.endswith("Z") else text[: -len("+00:00")]
    whole, _, frac = body.partition(".")
    sec = datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC).timestamp()
    return int(sec) * 1_000_000_000 + int((frac or "0").ljust(9, "0")[:9])


# --- the paths file ---------------------------------------------------------------------------


def test_paths_file_top_level(serial_trace, h) -> None:
    table, _ = serial_trace
    r = infer_nesting(table, "paper", overlap_penalty=1.5, bin_base=1.1, tolerance_s=0.0005, sort="count")
    doc = r.to_json()
    assert doc["format"] == "wirepath.paths/1"
    assert doc["algorithm"] == "nesting"
    params = doc["params"]
    assert params["overlap_penalty"] == 1.5
    assert params["bin_base"] == 1.1
    assert params["tolerance_s"] == 0.0005
    for name in (
        "same_node_penalty",
        "children_penalty",
        "bin_min_s",
        "bin_max_s",
        "smooth_bins",
        "use_ids",
        "density",
        "board",
    ):
        assert name in params
    ts = table["timestamp"].cast(pa.int64()).to_numpy()
    assert doc["trace"]["messages"] == table.num_rows
    assert iso_to_ns(doc["trace"]["start"]) == int(ts.min())
    assert iso_to_ns(doc["trace"]["end"]) == int(ts.max())
    stats = doc["stats"]
    n_calls = int((h.strings(table["op"]) == "call").sum())
    assert stats["call_pairs"] == n_calls
    assert stats["unmatched_calls"] == 0
    assert stats["unmatched_returns"] == 0
    assert stats["mean_parallelism"] == pytest.approx(1.0)
    # Plain JSON: it survives a round trip unchanged.
    assert json.loads(json.dumps(doc)) == doc


def test_paths_file_start_and_end_to_the_nanosecond(h) -> None:
    base = 1_700_000_000 * 1_000_000_000 + 123_456_789
    t = h.trace(
        [
            (base, "call", "a", "b", None),
            (base + 1, "call", "b", "c", None),
            (base + 2, "return", "c", "b", None),
            (base + 1_000_000_001, "return", "b", "a", None),
        ]
    )
    doc = infer_nesting(t, "paper").to_json()
    assert doc["trace"] == {
        "messages": 4,
        "start": doc["trace"]["start"],
        "end": doc["trace"]["end"],
    }
    assert iso_to_ns(doc["trace"]["start"]) == base
    assert iso_to_ns(doc["trace"]["end"]) == base + 1_000_000_001
    assert doc["trace"]["start"].startswith("2023-11-14T22:13:20.123456789")


def check_visit(v: dict[str, Any], root: bool) -> None:
    assert set(v) >= {"node", "caller", "latency_s", "delay_s", "children"}
    assert isinstance(v["node"], str)
    assert isinstance(v["caller"], str)
    assert set(v["latency_s"]) >= STAT_KEYS
    assert all(isinstance(v["latency_s"][k], float) for k in STAT_KEYS)
    if root:
        assert v["delay_s"] is None
    else:
        assert set(v["delay_s"]) >= STAT_KEYS
    for c in v["children"]:
        assert c["caller"] == v["node"]
        check_visit(c, False)


def test_paths_file_patterns(serial_trace, serial_result, h) -> None:
    table, truth = serial_trace
    tp = h.true_patterns(h.true_calls(table))
    doc = serial_result.to_json()
    assert len(doc["patterns"]) == len(truth["patterns"])
    for pat in doc["patterns"]:
        assert set(pat) >= {"id", "count", "total_latency_s", "root"}
        assert isinstance(pat["count"], int)
        assert isinstance(pat["total_latency_s"], float)
        check_visit(pat["root"], True)
        # The tree is the true tree, children in call order.
        assert h.shape_of_json(pat["root"]) == tp[pat["id"]].shape
        assert pattern_id(h.shape_of_json(pat["root"])) == pat["id"]
        assert pat["count"] == tp[pat["id"]].count
        assert pat["total_latency_s"] == pytest.approx(tp[pat["id"]].total_latency_s, rel=1e-9)
        assert pat["root"]["latency_s"]["mean"] * pat["count"] == pytest.approx(
            pat["total_latency_s"], rel=1e-9
        )
    totals = [p["total_latency_s"] for p in doc["patterns"]]
    assert totals == sorted(totals, reverse=True)


def test_top_and_min_count(serial_trace, serial_result) -> None:
    _, truth = serial_trace
    full = serial_result.to_json()["patterns"]
    assert [p["id"] for p in serial_result.to_json(top=2)["patterns"]] == [p["id"] for p in full[:2]]
    assert serial_result.to_json(top=0)["patterns"] == []
    counts = sorted(p["count"] for p in truth["patterns"])
    k = counts[len(counts) // 2]
    expect = [p["id"] for p in full if p["count"] >= k]
    true_kept = {p["id"] for p in truth["patterns"] if p["count"] >= k}
    assert 0 < len(true_kept) < len(truth["patterns"])
    doc = serial_result.to_json(min_count=k)
    assert [p["id"] for p in doc["patterns"]] == expect
    assert set(expect) == true_kept
    both = serial_result.to_json(top=1, min_count=k)
    assert [p["id"] for p in both["patterns"]] == expect[:1]
    assert both["params"]["top"] == 1
    assert both["params"]["min_count"] == k
    # Stats describe the whole result, not the kept patterns.
    assert both["stats"]["call_pairs"] == serial_result.to_json()["stats"]["call_pairs"]


# --- the instances table ----------------------------------------------------------------------


def test_instances_table(serial_trace, serial_result, h) -> None:
    table, _ = serial_trace
    t = serial_result.instances_table()
    n_calls = int((h.strings(table["op"]) == "call").sum())
    assert t.num_rows == n_calls
    assert t["pair"].to_pylist() == list(range(n_calls))
    call_row = t["call_row"].to_numpy()
    return_row = t["return_row"].to_numpy()
    call = h.ints(table["true_call"])
    assert np.array_equal(call[call_row], call[return_row])
    assert np.unique(call[call_row]).size == n_calls
    ts = table["timestamp"].cast(pa.int64()).to_numpy()
    assert np.array_equal(t["t_call"].cast(pa.int64()).to_numpy(), ts[call_row])
    assert np.array_equal(t["t_return"].cast(pa.int64()).to_numpy(), ts[return_row])
    assert np.array_equal(h.strings(t["caller"]), h.strings(table["sender"])[call_row])
    assert np.array_equal(h.strings(t["callee"]), h.strings(table["receiver"])[call_row])

    parent = t["parent"].to_pylist()
    true_parent = h.ints(table["true_parent"])[call_row]
    roots = np.array([p is None for p in parent])
    assert np.array_equal(roots, true_parent < 0)
    kids = np.flatnonzero(~roots)
    parent_rows = call_row[np.array([parent[k] for k in kids])]
    assert np.array_equal(call[parent_rows], true_parent[kids])

    instance = t["instance"].to_numpy()
    assert np.all(roots[instance])
    assert np.array_equal(instance[roots], np.flatnonzero(roots))
    inst = h.ints(table["true_instance"])
    assert np.array_equal(inst[call_row[instance]], inst[call_row])
    assert np.array_equal(h.strings(t["pattern"]), h.strings(table["true_pattern"])[call_row])

    conf = t["confidence"].to_numpy()
    assert np.all((conf > 0) & (conf <= 1))
    assert np.all(conf[roots] == 1.0)
    cand = t["candidates"].to_numpy()
    assert np.all(cand[roots] == 0)
    assert np.all(cand[~roots] == 1)


def test_instances_table_confidence_under_ambiguity(parallel_trace) -> None:
    table, _ = parallel_trace
    # The scoreboard's own shares (calibrated, a winner may be right less often than
    # one in as many candidates).
    t = infer_nesting(table, "paper", calibrate=False).instances_table()
    conf = t["confidence"].to_numpy()
    cand = t["candidates"].to_numpy()
    assert np.all((conf > 0) & (conf <= 1))
    assert np.any(conf < 1)
    # The winner has at least the mean share of its candidates' scores.
    has = cand > 0
    assert np.all(conf[has] >= 1 / cand[has] - 1e-12)


def test_write_instances(tmp_path: Path, serial_result) -> None:
    target = tmp_path / "sub" / "inst.parquet"
    serial_result.write_instances(target)
    back = pq.read_table(target)
    assert back.equals(serial_result.instances_table())
    assert [p.name for p in target.parent.iterdir()] == ["inst.parquet"]


# --- invariance -------------------------------------------------------------------------------


def test_shifting_all_timestamps_changes_nothing(serial_trace, serial_result) -> None:
    table, _ = serial_trace
    shift = 86_400 * 1_000_000_000 + 123_456_789
    ts = table["timestamp"].cast(pa.int64()).to_numpy() + shift
    moved = table.set_column(0, "timestamp", pa.array(ts, pa.int64()).cast(table.schema.field(0).type))
    r = infer_nesting(moved, "paper")
    assert r.to_json()["patterns"] == serial_result.to_json()["patterns"]
    assert np.array_equal(r.parent, serial_result.parent)
    assert iso_to_ns(r.to_json()["trace"]["start"]) == int(ts.min())


def test_shuffled_rows_give_identical_patterns(serial_trace, serial_result) -> None:
    table, _ = serial_trace
    shuffled = table.take(np.random.default_rng(17).permutation(table.num_rows))
    doc = infer_nesting(shuffled, "paper").to_json()
    ref = serial_result.to_json()
    assert doc["patterns"] == ref["patterns"]
    assert doc["trace"] == ref["trace"]
    assert doc["stats"] == ref["stats"]


# --- shapes from hand-built traces ----------------------------------------------------------


def test_deep_chain(h) -> None:
    depth = 40
    nodes = [f"n{k:02d}" for k in range(depth + 1)]
    rows = []
    for rep in range(2):
        t0 = rep * 1000 * MS
        for k in range(depth):
            rows.append((t0 + k * MS, "call", nodes[k], nodes[k + 1], rep * 100 + k))
        for k in reversed(range(depth)):
            rows.append((t0 + (200 - k) * MS, "return", nodes[k + 1], nodes[k], rep * 100 + k))
    r = infer_nesting(h.trace(rows), "paper")
    shape = Shape(nodes[depth - 1], nodes[depth])
    for k in reversed(range(depth - 1)):
        shape = Shape(nodes[k], nodes[k + 1], (shape,))
    assert [(p.shape, p.count) for p in r.patterns] == [(shape, 2)]
    assert r.patterns[0].id == pattern_id(shape)
    # Latency of visit k: (200 - k) - k ms; delay of visit k: 1 ms after its parent.
    lat = [v["mean"] for v in r.patterns[0].latency]
    assert lat == pytest.approx([(200 - 2 * k) / 1000 for k in range(depth)], rel=1e-12)
    assert r.patterns[0].delay[0] is None
    assert [d["mean"] for d in r.patterns[0].delay[1:]] == pytest.approx([0.001] * (depth - 1), rel=1e-9)


def test_child_order_and_nesting_make_different_patterns(h) -> None:
    def instance(t0: int, first: int, kids: list[tuple[str, int, int, str | None]]) -> list[tuple]:
        rows = [(t0, "call", "A", "X", first), (t0 + 50 * MS, "return", "X", "A", first)]
        for node, start, end, grandchild in kids:
            i = first + start
            rows += [(t0 + start * MS, "call", "X", node, i), (t0 + end * MS, "return", node, "X", i)]
            if grandchild:
                rows += [
                    (t0 + (start + 1) * MS, "call", node, grandchild, i + 100),
                    (t0 + (start + 2) * MS, "return", grandchild, node, i + 100),
                ]
        return rows

    rows = instance(0, 1000, [("B", 1, 5, None), ("C", 10, 15, None)])
    rows += instance(100 * MS, 2000, [("C", 1, 5, None), ("B", 10, 15, None)])
    rows += instance(200 * MS, 3000, [("C", 1, 5, None), ("B", 10, 15, None)])
    rows += instance(300 * MS, 4000, [("B", 1, 5, "C")])
    rows += instance(400 * MS, 5000, [("B", 1, 5, None), ("C", 3, 4, None)])  # overlapping children
    rows += instance(500 * MS, 6000, [("C", 1, 5, None), ("B", 2, 6, None)])  # the same, C first
    r = infer_nesting(h.trace(rows), "paper")
    got = {p.shape_text: p.count for p in r.patterns}
    assert got == {"A>X(X>B,X>C)": 1, "A>X(X>C,X>B)": 2, "A>X(X>B(B>C))": 1, "A>X(X>B|X>C)": 2}
    assert len({p.id for p in r.patterns}) == 4


def test_same_shape_from_different_callers_differs(h) -> None:
    rows = [
        (0, "call", "u1", "W", 1),
        (1 * MS, "call", "W", "D", 2),
        (2 * MS, "return", "D", "W", 2),
        (3 * MS, "return", "W", "u1", 1),
        (10 * MS, "call", "u2", "W", 3),
        (11 * MS, "call", "W", "D", 4),
        (12 * MS, "return", "D", "W", 4),
        (13 * MS, "return", "W", "u2", 3),
    ]
    r = infer_nesting(h.trace(rows), "paper")
    assert sorted(p.shape_text for p in r.patterns) == ["u1>W(W>D)", "u2>W(W>D)"]


# --- group statistics -------------------------------------------------------------------------


groups_strategy = st.lists(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, width=64), min_size=1, max_size=30),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None, database=None)
@given(groups_strategy, st.randoms(use_true_random=False))
def test_group_stats_matches_numpy(groups: list[list[float]], rnd) -> None:
    group = np.concatenate([np.full(len(g), k) for k, g in enumerate(groups)]).astype(np.int64)
    values = np.concatenate([np.array(g, np.float64) for g in groups])
    perm = np.arange(values.size)
    rnd.shuffle(perm)
    out = group_stats(group[perm], values[perm], len(groups))
    for k, g in enumerate(groups):
        v = np.array(g, np.float64)
        expect = {
            "mean": np.mean(v),
            "std": np.std(v),
            "p50": np.percentile(v, 50),
            "p90": np.percentile(v, 90),
            "p99": np.percentile(v, 99),
        }
        for name, e in expect.items():
            assert math.isclose(out[name][k], e, rel_tol=1e-9, abs_tol=1e-9), (name, k, out[name][k], e)


def test_group_stats_on_seeded_random_data() -> None:
    rng = np.random.default_rng(42)
    n_groups = 50
    group = rng.integers(0, n_groups, 20_000)
    group[:n_groups] = np.arange(n_groups)  # none empty
    values = rng.lognormal(-5, 1.0, group.size)
    out = group_stats(group, values, n_groups)
    for k in range(n_groups):
        v = values[group == k]
        np.testing.assert_allclose(out["mean"][k], v.mean(), rtol=1e-12)
        np.testing.assert_allclose(out["std"][k], v.std(), rtol=1e-9)
        for q in (50, 90, 99):
            np.testing.assert_allclose(out[f"p{q}"][k], np.percentile(v, q), rtol=1e-12)


def test_group_stats_is_latency_stats_per_group_with_empty_groups() -> None:
    # Groups 1 and 3 are empty: their statistics are those of no values.
    group = np.array([0, 0, 2, 2, 2, 4])
    values = np.array([1.0, 3.0, 10.0, 20.0, 30.0, 7.0])
    out = group_stats(group, values, 5)
    for k in range(5):
        expect = latency_stats(values[group == k])
        got = {name: float(out[name][k]) for name in STAT_KEYS}
        assert got == pytest.approx(expect, rel=1e-12, abs=0), k


def test_latency_stats_matches_numpy() -> None:
    v = np.random.default_rng(1).exponential(0.01, 1001)
    s = latency_stats(v)
    assert s == pytest.approx(
        {
            "mean": v.mean(),
            "p50": np.median(v),
            "p90": np.percentile(v, 90),
            "p99": np.percentile(v, 99),
            "std": v.std(),
        },
        rel=1e-12,
    )
    assert latency_stats(np.array([])) == dict.fromkeys(STAT_KEYS, 0.0)


@pytest.mark.parametrize(
    "parent", [[1, 0], [2, 0, 1], [1, 2, 0, -1]], ids=["pair", "triangle", "tail-into-loop"]
)
def test_pattern_building_refuses_loops_of_parent_links(parent: list[int]) -> None:
    from infer.patterns import depths

    with pytest.raises(ValueError, match="loop"):
        depths(np.array(parent))
