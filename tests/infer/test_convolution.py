"""The convolution algorithm against ground truth, reference computations and bad input.

Expected delays and counts come from the synth configurations written here (the delays
drawn) and from the trace's own messages counted in the test; the FFT correlation is
checked against a direct ``numpy.correlate``.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import pyarrow as pa
import pytest

import infer
from infer._convsignal import Correlator, find_spikes, local_background, moving_mean
from tracefmt import ParameterError, SchemaError, empty_trace

TS = pa.timestamp("ns", tz="UTC")


def _table(rows: list[tuple[float, str, str]]) -> pa.Table:
    """A send-only trace from ``(seconds, sender, receiver)`` rows."""
    return pa.table(
        {
            "timestamp": pa.array([round(r[0] * 1e9) for r in rows], pa.int64()).cast(TS),
            "sender": [r[1] for r in rows],
            "receiver": [r[2] for r in rows],
            "op": ["send"] * len(rows),
            "id": pa.array([None] * len(rows), pa.uint64()),
        }
    )


def _edge_count(table: pa.Table, a: str, b: str) -> int:
    s = np.asarray(table["sender"].cast(pa.string()).to_pylist())
    r = np.asarray(table["receiver"].cast(pa.string()).to_pylist())
    return int(((s == a) & (r == b)).sum())


# --- kernels ------------------------------------------------------------------------------


def test_spikes_follow_the_papers_rule() -> None:
    # 5 and 6 share a run above 3 (no dip to 3 or below): one spike, at the higher.
    z = np.array([0, 1, 5, 3.5, 6, 0, 0, 4.5, 0, 3.9, 0.0])
    got = find_spikes(z, n_sigma=4, sep_sigma=3)
    assert [s.lag for s in got] == [4, 7]  # 3.9 is above S but below N
    assert got[0].z == 6.0
    # A dip to exactly S separates.
    assert [s.lag for s in find_spikes(np.array([0, 5, 3, 6, 0.0]))] == [1, 3]
    assert find_spikes(np.zeros(0)) == []
    assert find_spikes(np.full(20, 2.0)) == []


def test_moving_mean_and_local_background_by_hand() -> None:
    x = np.array([1.0, 2, 3, 10, 5])
    assert moving_mean(x, 1).tolist() == [1.5, 2.0, 5.0, 6.0, 7.5]
    # Ring of half-width 2 without the point itself: lag 3 sees 2, 3 and 5.
    assert local_background(x, 2, 0)[3] == pytest.approx((2 + 3 + 5) / 3)


def test_fft_correlation_equals_direct_correlation() -> None:
    rng = np.random.default_rng(4)
    n_slots, max_lag, neg = 500, 60, 7
    slots = rng.integers(0, n_slots, 3000)
    edge = rng.integers(0, 2, 3000)
    slots[0], edge[0] = n_slots - 1, 0  # the signals span every slot
    corr = Correlator(np.sort(slots), edge[np.argsort(slots)], 2, n_slots, max_lag, neg)
    s_in, s_out = (
        np.bincount(np.sort(slots)[edge[np.argsort(slots)] == e], minlength=n_slots) for e in (0, 1)
    )
    sq, raw = corr.correlate(0, 1)
    lags = np.arange(-neg, max_lag + 1)
    full_raw = np.correlate(s_out.astype(float), s_in.astype(float), mode="full")  # index n-1 is lag 0
    full_sq = np.correlate(np.sqrt(s_out), np.sqrt(s_in), mode="full")
    scale = n_slots / (n_slots - np.abs(lags))
    np.testing.assert_allclose(raw, full_raw[n_slots - 1 + lags] * scale, rtol=1e-9, atol=1e-6)
    np.testing.assert_allclose(sq, full_sq[n_slots - 1 + lags] * scale, rtol=1e-9, atol=1e-6)
    assert corr.n_fft >= n_slots + max_lag


# --- against ground truth -----------------------------------------------------------------


def test_chain_delays_and_counts_match_the_truth(chain: pa.Table) -> None:
    r = infer.infer_convolution(chain, quantum_s=0.01, max_lag_s=1.0)
    assert r.roots == ["a"]
    assert [p.nodes for p in r.paths] == [("a", "b", "c", "d")]
    p = r.paths[0]
    # Two delays at b, the 70% one first; one at c.
    assert p.delays_s[0][0] == pytest.approx(0.05, abs=0.01)
    assert p.delays_s[0][1] == pytest.approx(0.3, abs=0.01)
    assert p.delays_s[1] == pytest.approx((0.2,), abs=0.01)
    share = p.delay_counts[0][0] / sum(p.delay_counts[0])
    assert share == pytest.approx(0.7, abs=0.05)
    n_ab = _edge_count(chain, "a", "b")
    assert p.counts[0] == n_ab
    assert p.counts[1] == pytest.approx(_edge_count(chain, "b", "c"), rel=0.05)
    assert p.counts[2] == pytest.approx(_edge_count(chain, "c", "d"), rel=0.05)
    # The graph holds the same hops.
    g = r.graph
    assert isinstance(g, nx.DiGraph)
    assert [g.nodes[v]["node"] for v in nx.topological_sort(g)] == ["a", "b", "c", "d"]


def test_lag_estimate_is_the_papers_quantized_delay(chain: pa.Table) -> None:
    r = infer.infer_convolution(chain, quantum_s=0.1, max_lag_s=2.0, delay_estimate="lag")
    p = r.paths[0]
    # Delays read as whole quanta: 0.05 s is in lag 0 or 1, 0.3 s in lag 3 (or 2).
    for d in (*p.delays_s[0], *p.delays_s[1]):
        assert (d / 0.1) == pytest.approx(round(d / 0.1))
    assert min(p.delays_s[0]) <= 0.1


def test_shifting_all_timestamps_changes_nothing(chain: pa.Table) -> None:
    a = infer.infer_convolution(chain, quantum_s=0.01, max_lag_s=1.0)
    ts = chain["timestamp"].cast(pa.int64()).to_numpy() + 3_600_123_456_789
    shifted = chain.set_column(0, "timestamp", pa.array(ts, pa.int64()).cast(TS))
    b = infer.infer_convolution(shifted, quantum_s=0.01, max_lag_s=1.0)
    assert [p.to_json() for p in a.paths] == [p.to_json() for p in b.paths]


def test_row_order_changes_nothing(chain: pa.Table) -> None:
    a = infer.infer_convolution(chain, quantum_s=0.01, max_lag_s=1.0)
    shuffled = chain.take(np.random.default_rng(5).permutation(chain.num_rows))
    b = infer.infer_convolution(shuffled, quantum_s=0.01, max_lag_s=1.0)
    assert [p.to_json() for p in a.paths] == [p.to_json() for p in b.paths]


def test_rpc_paths_and_short_path_refinement(rpc: pa.Table) -> None:
    kw: dict[str, Any] = {"quantum_s": 0.001, "max_lag_s": 0.2, "band_s": 0.001}
    r = infer.infer_convolution(rpc, **kw)
    assert r.roots == ["client"]
    nodes = [p.nodes for p in r.paths]
    assert ("client", "WS", "DB", "WS", "client") in nodes
    p = r.paths[nodes.index(("client", "WS", "DB", "WS", "client"))]
    # before 4 ms at WS, 10 ms at DB, 2 ms after at WS
    assert [d[0] for d in p.delays_s] == pytest.approx([0.004, 0.010, 0.002], abs=0.001)
    # client->WS->client (the whole visit, about 16 ms) is the long path with its middle
    # left out: found without the refinement, dropped with it.
    raw = infer.infer_convolution(rpc, keep_short_paths=True, **kw)
    short = ("client", "WS", "client")
    assert short in [p.nodes for p in raw.paths]
    assert short not in nodes
    assert r.stats["short_hops"] >= 1


def test_depth_limit_and_min_count(rpc: pa.Table) -> None:
    kw: dict[str, Any] = {"quantum_s": 0.001, "max_lag_s": 0.2, "band_s": 0.001}
    r = infer.infer_convolution(rpc, max_depth=2, **kw)
    assert max(len(p.nodes) - 1 for p in r.paths) == 2
    assert r.stats["cut_depth"] > 0
    n = _edge_count(rpc, "client", "WS")
    r = infer.infer_convolution(rpc, min_count=n + 1, **kw)
    assert r.paths == []
    assert r.notes
    r = infer.infer_convolution(rpc, min_count=n * 0.5, **kw)
    assert r.paths
    assert all(p.count >= n * 0.5 for p in r.paths)


def test_cycles_are_cut() -> None:
    # A closed loop: b answers a after 20 ms, a asks again 10 ms after the answer, and
    # now and then pauses (so the series is not periodic).
    rows = []
    t = 0.0
    rng = np.random.default_rng(2)
    for _ in range(3000):
        rows.append((t, "a", "b"))
        answer = t + 0.02 + rng.normal(0, 0.0005)
        rows.append((answer, "b", "a"))
        t = answer + 0.01 + rng.normal(0, 0.0005) + (rng.uniform(0, 0.5) if rng.random() < 0.2 else 0)
    table = _table(rows)
    kw: dict[str, Any] = {"quantum_s": 0.001, "max_lag_s": 0.2, "band_s": 0.001, "root": "a"}
    # By default a path ends where it comes back to its root: a b a.
    r = infer.infer_convolution(table, **kw)
    assert [p.nodes for p in r.paths] == [("a", "b", "a")]
    assert r.stats["cut_root"] == 1
    # Through the root, each transition once: a b a b (then b->a would repeat).
    r = infer.infer_convolution(table, through_root=True, **kw)
    assert [p.nodes for p in r.paths] == [("a", "b", "a", "b")]
    assert r.stats["cut_repeats"] == 1
    r2 = infer.infer_convolution(table, through_root=True, max_repeats=2, **kw)
    assert max(len(p.nodes) for p in r2.paths) == 8  # each of the two transitions three times
    # Without a root everything is explained (a closed loop): the result says so.
    r3 = infer.infer_convolution(table, quantum_s=0.001, max_lag_s=0.2, band_s=0.001)
    assert r3.paths == []
    assert any("root" in n for n in r3.notes)


def test_negative_lag_tails_are_dropped() -> None:
    # b->c comes about 0.7 quanta BEFORE a->b: no causal relation a->b->c, but the
    # tail of the negative peak reaches lag 0. The pairs sharing a quantum there are in
    # the wrong order, so even without the plausibility test no path a->b->c is found.
    rng = np.random.default_rng(9)
    rows = []
    for k in range(4000):
        t = k * 0.3 + rng.uniform(0, 0.2)
        rows.append((t, "b", "c"))
        rows.append((t + 0.007 + rng.normal(0, 0.001), "a", "b"))
    table = _table(sorted(rows))
    kw: dict[str, Any] = {"quantum_s": 0.01, "max_lag_s": 0.25, "root": "a"}
    kept = infer.infer_convolution(table, keep_implausible=True, **kw)
    assert ("a", "b", "c") not in [p.nodes for p in kept.paths]
    r = infer.infer_convolution(table, **kw)
    assert [p.nodes for p in r.paths] == [("a", "b")]
    assert r.stats["spikes_negative"] >= 1


def test_paths_file_follows_the_contract(chain: pa.Table) -> None:
    doc = infer.infer_convolution(chain, quantum_s=0.01, max_lag_s=1.0).to_json()
    assert doc["format"] == "wirepath.paths/1"
    assert doc["algorithm"] == "convolution"
    assert doc["params"]["quantum_s"] == 0.01
    assert doc["params"]["n_sigma"] == 4.0
    assert doc["trace"]["messages"] == chain.num_rows
    for p in doc["paths"]:
        assert len(p["counts"]) == len(p["nodes"]) - 1
        assert len(p["delays_s"]) == len(p["nodes"]) - 2
        for d in p["delays_s"]:
            assert d  # at least one delay per hop
    g = doc["graph"]
    assert {v["node"] for v in g["vertices"]} == {"a", "b", "c", "d"}
    assert len(g["edges"]) == len(g["vertices"]) - 1
    import json

    json.dumps(doc)  # plain JSON types only


# --- bad input ----------------------------------------------------------------------------


def test_quantum_longer_than_the_trace(chain: pa.Table) -> None:
    with pytest.raises(ParameterError, match="longer than the trace"):
        infer.infer_convolution(chain, quantum_s=1e6, max_lag_s=1e8)


def test_one_edge_gives_one_hop_and_a_reason() -> None:
    r = infer.infer_convolution(_table([(k * 0.5, "a", "b") for k in range(100)]), quantum_s=0.1, max_lag_s=2)
    assert [p.nodes for p in r.paths] == [("a", "b")]
    assert r.paths[0].counts == (100.0,)
    assert "one directed edge" in r.notes[0]


def test_root_that_sends_nothing_or_is_unknown(chain: pa.Table) -> None:
    with pytest.raises(ParameterError, match=r"root .d. sends no messages .*a, b, c"):
        infer.infer_convolution(chain, quantum_s=0.01, max_lag_s=1.0, root="d")
    with pytest.raises(ParameterError, match="'zz' is not a node"):
        infer.infer_convolution(chain, quantum_s=0.01, max_lag_s=1.0, root=["a", "zz"])


def test_zero_duration_and_empty_traces() -> None:
    with pytest.raises(SchemaError, match="share one timestamp"):
        infer.infer_convolution(_table([(5.0, "a", "b"), (5.0, "b", "c")]), quantum_s=0.1, max_lag_s=2)
    with pytest.raises(SchemaError, match="no messages"):
        infer.infer_convolution(empty_trace(), quantum_s=0.1, max_lag_s=2)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"quantum_s": float("nan")}, "quantum_s must be a finite number"),
        ({"max_lag_s": float("inf")}, "max_lag_s must be a finite number"),
        ({"quantum_s": 0.0}, "quantum_s must be > 0"),
        ({"quantum_s": -1.0}, "quantum_s must be > 0"),
        ({"max_lag_s": 0.05}, "at least 10"),
        ({"n_sigma": 2.0}, "sep_sigma <= n_sigma"),
        ({"band_s": -0.1}, "band_s must be >= 0"),
        ({"max_depth": 0}, "max_depth must be an integer >= 1"),
        ({"count_estimate": "peak"}, "must be raw or sqrt"),
        ({"delay_estimate": "mean"}, "must be centroid or lag"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_bad_parameters(chain: pa.Table, kw: dict[str, Any], match: str) -> None:
    args = {"quantum_s": 0.01, "max_lag_s": 1.0, **kw}
    with pytest.raises(ParameterError, match=match):
        infer.infer_convolution(chain, **args)


def test_lags_beyond_half_the_trace_are_cut_with_a_note(chain: pa.Table) -> None:
    r = infer.infer_convolution(chain, quantum_s=1.0, max_lag_s=1e5)
    assert any(n.startswith("max_lag cut") for n in r.notes)
    assert r.stats["fft_length"] < 2 * r.stats["quanta"]


def test_direct_and_fft_correlation_give_the_same_paths(chain: pa.Table) -> None:
    kw: dict[str, Any] = {"quantum_s": 0.01, "max_lag_s": 1.0}
    fft = infer.infer_convolution(chain, method="fft", **kw)
    direct = infer.infer_convolution(chain, method="direct", **kw)
    assert fft.stats["pairs_direct"] == 0
    assert direct.stats["ffts"] == 0
    assert direct.stats["pairs_direct"] == direct.stats["pairs_correlated"]
    for a, b in zip(fft.paths, direct.paths, strict=True):
        assert a.nodes == b.nodes
        np.testing.assert_allclose(a.counts, b.counts, rtol=1e-9)
        for da, db in zip(a.delays_s, b.delays_s, strict=True):
            np.testing.assert_allclose(da, db, rtol=1e-9)


def test_chance_coincidences_in_a_sparse_trace_are_no_spikes() -> None:
    # 40 messages a->b and 40 b->c over three hours, independent: at 1 s quanta almost
    # every lag holds no pair, so one chance pair is many deviations above the mean; the
    # Poisson test of the pair count keeps it out. b->c 3 s after a->b is kept.
    rng = np.random.default_rng(12)
    ab = np.sort(rng.uniform(0, 10_000, 40))
    independent = [(t, "a", "b") for t in ab] + [(t, "b", "c") for t in rng.uniform(0, 10_000, 40)]
    kw: dict[str, Any] = {"quantum_s": 1.0, "max_lag_s": 200.0, "root": "a"}
    r = infer.infer_convolution(_table(sorted(independent)), **kw)
    assert [p.nodes for p in r.paths] == [("a", "b")]
    assert r.stats["spikes_too_few_pairs"] >= 1
    caused = [(t, "a", "b") for t in ab] + [(t + 3.0, "b", "c") for t in ab]
    r = infer.infer_convolution(_table(sorted(caused)), **kw)
    assert [p.nodes for p in r.paths] == [("a", "b", "c")]
    assert r.paths[0].delays_s[0][0] == pytest.approx(3.0, abs=1.0)
