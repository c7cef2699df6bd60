"""Ground truth: the true_* columns, the measured parallelism, and the truth file.

The structural checks run on STRUCT_TOML (conftest.py): calls nested three deep,
optional calls, choices, repeats from 0, a parallel group, two tracelets, and several
client loops, without faults.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import synth
from tracefmt import read_trace

# --- the true_* columns ------------------------------------------------------------------


def test_every_call_has_one_return_going_back(struct_trace) -> None:
    _, _, m, c = struct_trace  # calls_of checks that calls and returns pair one to one
    assert set(m.op.tolist()) == {"call", "return"}
    assert m.size == 2 * c.uid.size
    ret = np.flatnonzero(m.op == "return")
    ret = ret[np.argsort(m.call[ret])]
    assert np.array_equal(m.sender[ret], c.callee)
    assert np.array_equal(m.receiver[ret], c.caller)
    assert np.all(c.t_ret >= c.t_call)
    # Without id faults the protocol id is the true call, on both messages.
    assert np.array_equal(c.id_call, c.uid)
    assert np.array_equal(c.id_ret, c.uid)
    # Both messages carry the instance, pattern and parent of their call.
    assert np.array_equal(m.inst[ret], c.inst)
    assert np.array_equal(m.pattern[ret], c.pattern)
    assert np.array_equal(m.parent[ret], c.parent)


def test_children_nest_in_their_parent(struct_trace) -> None:
    _, _, _, c = struct_trace
    child = np.flatnonzero(c.parent >= 0)
    assert child.size > 0
    p = c.index(c.parent[child])
    assert np.array_equal(c.caller[child], c.callee[p])  # made by the parent's callee
    assert np.array_equal(c.inst[child], c.inst[p])
    assert np.all(c.t_call[p] <= c.t_call[child])
    assert np.all(c.t_ret[child] <= c.t_ret[p])


def test_roots_come_from_the_client(struct_trace) -> None:
    _, _, _, c = struct_trace
    roots = np.flatnonzero(c.parent < 0)
    assert np.unique(c.inst[roots]).size == roots.size == np.unique(c.inst).size  # one per instance
    assert set(c.caller[roots].tolist()) == {"client", "u1", "u2"}
    assert set(c.callee[roots].tolist()) == {"A"}
    # The clients only ever start instances.
    assert set(c.caller[c.parent >= 0].tolist()).isdisjoint({"client", "u1", "u2"})
    assert set(c.callee.tolist()).isdisjoint({"client", "u1", "u2"})


def test_parallel_group_starts_together_and_serial_children_do_not_overlap(struct_trace) -> None:
    _, _, _, c = struct_trace
    kids = c.children()
    groups = 0
    for parent, ks in kids.items():
        # Collapse the parallel group (E and F) into one interval, in call order.
        blocks: list[tuple[int, int, str]] = []
        for k in ks:
            name = "EF" if c.callee[k] in ("E", "F") else str(c.callee[k])
            if blocks and name == "EF" and blocks[-1][2] == "EF":
                assert c.t_call[k] == blocks[-1][0]  # started together
                blocks[-1] = (blocks[-1][0], max(blocks[-1][1], int(c.t_ret[k])), "EF")
                groups += 1
            else:
                blocks.append((int(c.t_call[k]), int(c.t_ret[k]), name))
        for (_, end, _), (begin, _, _) in itertools.pairwise(blocks):
            assert begin > end, f"children of call {c.uid[parent]} overlap"
        order = "".join(b[2] if b[2] != "EF" else "X" for b in blocks)
        if c.callee[parent] == "A":
            assert order in {
                "XG",
                "XGG",
                "BXG",
                "BXGG",
                "CXG",
                "CXGG",
            }, order
        else:
            assert c.callee[parent] in ("B", "C")
            assert order in {"D", "DD"}, order
    assert groups > 100  # the group with both members present happened


def test_true_pattern_is_the_shape_of_the_instance(struct_trace, h) -> None:
    _, _, m, c = struct_trace
    expected = h.rpc_pattern_ids(c)
    assert [expected[i] for i in m.inst.tolist()] == m.pattern.tolist()
    # Every choice of the template shows as a distinct shape.
    assert len(set(expected.values())) > 30


def test_pattern_of_a_known_shape(h) -> None:
    # One fixed shape, written out by hand.
    from tracefmt.patterns import Shape, pattern_id

    text = """\
nodes = ["client", "A", "B", "C"]
[trace]
messages = 200
[[tracelet]]
client = "client"
[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.001, 0.0001]
[[tracelet.call]]
id = "b"
parent = "a"
to = "B"
repeat = 2
[[tracelet.call]]
id = "c"
parent = "b"
to = "C"
before_s = [0.001, 0.0001]
[[tracelet.call]]
parent = "a"
to = "C"
"""
    table, truth = h.generate(text)
    leaf = Shape("B", "C")
    shape = Shape("client", "A", (Shape("A", "B", (leaf,)), Shape("A", "B", (leaf,)), Shape("A", "C")))
    assert set(table["true_pattern"].cast("string").to_pylist()) == {pattern_id(shape)}
    assert [p["id"] for p in truth["patterns"]] == [pattern_id(shape)]


# --- mean parallelism --------------------------------------------------------------------

PARALLEL_TOML = """\
nodes = ["client", "WS", "AP", "DB"]
[trace]
seed = 4
messages = 20000
parallelism = {k}
resolution_s = 1e-9
[[tracelet]]
client = "client"
think_s = [0.0, 0.02]
[[tracelet.call]]
id = "ws"
to = "WS"
before_s = [0.002, 0.0005]
after_s = [0.001, 0.0002]
[[tracelet.call]]
id = "ap"
parent = "ws"
to = "AP"
before_s = [0.003, 0.0007]
after_s = [0.001, 0.0002]
[[tracelet.call]]
id = "db"
parent = "ap"
to = "DB"
before_s = [0.010, 0.003]
"""


@pytest.mark.parametrize("k", [8, 20])
def test_measured_parallelism_matches_request(tmp_path: Path, h, k: int) -> None:
    report = synth.generate_trace(h.config(PARALLEL_TOML.format(k=k)), tmp_path / "t.parquet")
    c = h.calls(h.msgs(read_trace(tmp_path / "t.parquet")))
    brute = h.brute_parallelism(c)
    assert report.requested_parallelism == k
    assert report.mean_parallelism == pytest.approx(brute, rel=1e-3)  # the report is right
    assert abs(brute - k) <= 0.1 * k  # and close to the request


def test_measured_parallelism_on_the_struct_trace(struct_trace, h) -> None:
    # Parallel groups, optional calls and two tracelets.
    _, truth, _, c = struct_trace
    assert truth["mean_parallelism"] == pytest.approx(h.brute_parallelism(c), rel=1e-3)
    assert abs(truth["mean_parallelism"] - 4) <= 0.4


_times = st.integers(0, 12)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 3), _times, st.integers(0, 6)),
        min_size=1,
        max_size=60,
    )
)
def test_mean_parallelism_function_against_brute_force(h, rows) -> None:
    # Small integer times make ties common: both bounds are inclusive.
    callee = np.array([r[0] for r in rows])
    caller = np.array([r[1] for r in rows])
    t_call = np.array([float(r[2]) for r in rows])
    t_ret = t_call + np.array([float(r[3]) for r in rows])
    total = children = 0
    for k in range(len(rows)):
        into = callee == caller[k]
        if not into.any():
            continue
        children += 1
        total += int((into & (t_call <= t_call[k]) & (t_ret >= t_ret[k])).sum())
    expected = total / children if children else 0.0
    assert synth.mean_parallelism(callee, caller, t_call, t_ret) == pytest.approx(expected)


def test_mean_parallelism_function_large_blocks(h) -> None:
    # Enough calls into one node for the blocked counting path (blocks of >= 32).
    rng = np.random.default_rng(3)
    n = 3000
    callee = rng.integers(0, 3, n)
    caller = rng.integers(0, 3, n)
    t_call = np.round(rng.uniform(0, 50, n), 1)
    t_ret = t_call + np.round(rng.exponential(3, n), 1)
    total = children = 0
    for k in range(n):
        into = callee == caller[k]
        if into.any():
            children += 1
            total += int((into & (t_call <= t_call[k]) & (t_ret >= t_ret[k])).sum())
    assert synth.mean_parallelism(callee, caller, t_call, t_ret) == pytest.approx(total / children)


# --- the truth file ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def truth_run(tmp_path_factory, h, struct_toml: str):
    d = tmp_path_factory.mktemp("truth")
    text = struct_toml.replace("resolution_s = 1e-9", "resolution_s = 1e-6")
    report = synth.generate_trace(
        h.config(text, messages=10000), d / "t.parquet", truth_path=d / "sub" / "truth.json"
    )
    truth = json.loads((d / "sub" / "truth.json").read_text())
    m = h.msgs(read_trace(d / "t.parquet"))
    return report, truth, m, h.calls(m)


def test_truth_file_counts(truth_run) -> None:
    report, truth, m, _ = truth_run
    counts = [p["count"] for p in truth["patterns"]]
    assert counts == sorted(counts, reverse=True)
    assert truth["messages"] == m.size == report.messages
    n_inst = int(np.unique(m.inst).size)
    assert sum(counts) == truth["instances"] == report.instances == n_inst
    assert truth["mean_parallelism"] == report.mean_parallelism
    assert len(truth["patterns"]) == report.patterns
    # The same pattern ids as the trace, with the trace's instance counts.
    first = {}
    for inst, pat in zip(m.inst.tolist(), m.pattern.tolist(), strict=True):
        first.setdefault(inst, pat)
    in_trace = Counter(first.values())
    assert {p["id"]: p["count"] for p in truth["patterns"]} == dict(in_trace)
    assert len({p["id"] for p in truth["patterns"]}) == len(truth["patterns"])


def test_truth_file_latencies_match_the_trace(truth_run) -> None:
    """Every visit's latency (and every edge's delay) mean equals the trace's, to the resolution."""
    _, truth, _, c = truth_run
    kids = c.children()
    # Per pattern, per position in the visit tree: latencies and delays from the trace.
    lat: dict[tuple[str, tuple[int, ...]], list[float]] = defaultdict(list)
    delay: dict[tuple[str, tuple[int, ...]], list[float]] = defaultdict(list)
    total: dict[str, float] = defaultdict(float)

    def walk(k: int, pat: str, pos: tuple[int, ...]) -> None:
        lat[pat, pos].append((c.t_ret[k] - c.t_call[k]) / 1e9)
        for j, kid in enumerate(kids.get(k, [])):
            delay[pat, (*pos, j)].append((c.t_call[kid] - c.t_call[k]) / 1e9)
            walk(kid, pat, (*pos, j))

    for root in np.flatnonzero(c.parent < 0).tolist():
        walk(root, str(c.pattern[root]), ())
        total[str(c.pattern[root])] += (c.t_ret[root] - c.t_call[root]) / 1e9

    resolution = 1e-6
    checked = 0
    seen: set[tuple[str, tuple[int, ...]]] = set()

    def check(pat: str, visit: dict, pos: tuple[int, ...], caller: str) -> None:
        nonlocal checked
        assert visit["caller"] == caller
        want = np.array(lat[pat, pos])
        assert visit["latency_s"]["mean"] == pytest.approx(want.mean(), abs=resolution)
        assert visit["latency_s"]["p50"] == pytest.approx(np.median(want), abs=resolution)
        assert visit["latency_s"]["std"] == pytest.approx(want.std(), abs=resolution)
        if pos:
            assert visit["delay_s"]["mean"] == pytest.approx(np.mean(delay[pat, pos]), abs=resolution)
        else:
            assert visit["delay_s"] is None
        checked += 1
        seen.add((pat, pos))
        for j, child in enumerate(visit["children"]):
            check(pat, child, (*pos, j), visit["node"])

    for p in truth["patterns"]:
        check(p["id"], p["root"], (), p["root"]["caller"])
        assert p["total_latency_s"] == pytest.approx(total[p["id"]], abs=resolution * p["count"])
    assert seen == set(lat)  # the trees have exactly the trace's visits
    assert checked > 100


def test_truth_file_for_one_way_messages(tmp_path: Path, h) -> None:
    text = """\
nodes = ["s", "r", "x", "y"]
[trace]
seed = 8
messages = 6000
parallelism = 3
[[tracelet]]
kind = "messages"
client = "s"
think_s = [0.1, 0.2]
[[tracelet.hop]]
to = "r"
delay_s = [0.01, 0.002]
[[tracelet.hop]]
to = ["x", "y"]
delay_s = [0.03, 0.004]
"""
    report = synth.generate_trace(h.config(text), tmp_path / "t.parquet", truth_path=tmp_path / "t.json")
    truth = json.loads((tmp_path / "t.json").read_text())
    m = h.msgs(read_trace(tmp_path / "t.parquet"))
    chains: dict[int, list[int]] = defaultdict(list)
    for i in np.argsort(m.ts, kind="stable").tolist():
        chains[int(m.inst[i])].append(i)
    by_path: dict[tuple[str, ...], list[float]] = defaultdict(list)
    for rows in chains.values():
        path = (str(m.sender[rows[0]]), *(str(m.receiver[i]) for i in rows))
        by_path[path].append((m.ts[rows[1]] - m.ts[rows[0]]) / 1e9)
    ids = h.message_pattern_ids(m)
    assert sum(p["count"] for p in truth["patterns"]) == report.instances == len(chains)
    assert {p["id"] for p in truth["patterns"]} == set(ids.values())
    for p in truth["patterns"]:
        path = tuple(p["nodes"])
        assert p["count"] == len(by_path[path])
        assert len(p["hop_delays_s"]) == 1
        assert p["hop_delays_s"][0]["mean"] == pytest.approx(np.mean(by_path[path]), abs=1e-6)


_ONE_WAY = """\
nodes = ["s", "r", "x"]
[trace]
seed = 8
messages = 3000
parallelism = 3
[[tracelet]]
kind = "messages"
client = "s"
think_s = [0.1, 0.2]
[[tracelet.hop]]
to = "r"
delay_s = [0.01, 0.002]
[[tracelet.hop]]
to = "x"
delay_s = [0.03, 0.004]
"""


@pytest.mark.parametrize("kind", ["rpc", "messages"])
def test_generate_table_and_generate_trace_give_the_same_truth(tmp_path: Path, h, struct_toml, kind) -> None:
    cfg = h.config(struct_toml, messages=3000) if kind == "rpc" else h.config(_ONE_WAY)
    _, in_memory = synth.generate_table(cfg)
    synth.generate_trace(cfg, tmp_path / "t.parquet", truth_path=tmp_path / "t.json")
    on_disk = json.loads((tmp_path / "t.json").read_text())
    assert in_memory == on_disk
