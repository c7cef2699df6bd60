"""Chain rounds: children moved to where their node's chains of events are most likely.

The chains a parent assignment implies are checked against a hand-built expectation;
every score a round computes is checked against the likelihood of whole assignments
recomputed from scratch (brute force over the chains, not the round's neighbour
search); accuracy is scored against synth's ground truth.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import synth
from infer import infer_nesting
from infer.callpairs import CallPairs, match_calls, node_codes
from infer.candidates import CandidateChunks, Scoreboard
from infer.chains import ChainModel, _round, chain_edges, chain_rounds, neighbourhood_log_odds
from infer.evaluate import true_pairs
from infer.params import NestingParams
from tracefmt import ParameterError

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"


def _pairs(caller, callee, t_call, t_return) -> CallPairs:
    k = len(caller)
    return CallPairs(
        np.array(caller),
        np.array(callee),
        np.array(t_call),
        np.array(t_return),
        np.arange(k),
        np.arange(k),
        0,
        0,
        0,
    )


def test_chain_edges_link_each_event_to_the_one_it_causes() -> None:
    # Node 1 serves two calls at once: pair 0 (children 2, 4) and pair 1 (child 3);
    # pairs 2, 3 and 4 are leaves at nodes 2 and 3.
    p = _pairs([0, 0, 1, 1, 1], [1, 1, 2, 3, 2], [0, 1, 2, 3, 6], [10, 9, 5, 8, 7])
    parent = np.array([-1, -1, 0, 1, 0])
    got = set(zip(*(a.tolist() for a in chain_edges(p, parent)), strict=True))
    call, ret = 0, 1
    expected = {
        (call, 0, call, 2),  # 0 called -> its first child 2 called
        (ret, 2, call, 4),  # 2 returned -> the next child 4 called
        (ret, 4, ret, 0),  # the last child returned -> 0 returns
        (call, 1, call, 3),
        (ret, 3, ret, 1),
        (call, 2, ret, 2),  # leaves: called -> return
        (call, 3, ret, 3),
        (call, 4, ret, 4),
    }
    assert got == expected


@pytest.fixture(scope="module")
def busy() -> dict:
    """A small, busy trace with its pairs, candidate chunks, truth and a wrong-ish start."""
    cfg = synth.load_config(SAMPLES / "multitier-skewed.toml")
    cfg = synth.with_delay_spread(replace(cfg, messages=6_000, parallelism=8.0, seed=3), 0.10)
    trace = synth.generate_table(cfg)[0]
    nodes = node_codes(trace)
    pairs = match_calls(trace, nodes)
    params = NestingParams(board="joint", density=True)
    n_nodes = len(nodes.names)
    chunks = CandidateChunks(pairs, 0, Scoreboard(params, n_nodes), siblings=True)
    tp, tpar, _, _ = true_pairs(trace)
    assert np.array_equal(tp.call_row, pairs.call_row)
    start = infer_nesting(trace, "paper", board="joint", density=True).parent
    return {
        "trace": trace,
        "pairs": pairs,
        "chunks": chunks,
        "params": params,
        "n_nodes": n_nodes,
        "truth": tpar,
        "start": start,
    }


def _likelihood(pairs: CallPairs, parent: np.ndarray, model: ChainModel) -> float:
    return float(model.lookup(model.cells(pairs, *chain_edges(pairs, parent))).sum())


def _applied(parent: np.ndarray, proposals, keep: np.ndarray, pairs_t_call: np.ndarray) -> np.ndarray:
    """``parent`` with the proposals ``keep`` applied: a move, a swap (``other``), or a
    run (``count`` siblings in call order from ``child`` on, ties by index)."""
    out = parent.copy()
    for i in np.atleast_1d(keep):
        c = proposals.child[i]
        siblings = sorted(np.flatnonzero(parent == parent[c]).tolist(), key=lambda k: (pairs_t_call[k], k))
        run = siblings[siblings.index(c) : siblings.index(c) + proposals.count[i]]
        assert len(run) == proposals.count[i]
        out[run] = proposals.dest[i]
        if proposals.other[i] >= 0:
            out[proposals.other[i]] = proposals.source[i]
    return out


def test_scores_are_changes_in_the_likelihood_of_whole_assignments(busy) -> None:
    pairs, parent = busy["pairs"], busy["start"]
    model = ChainModel.learn(pairs, parent, busy["params"], busy["n_nodes"])
    proposals, here, _ = _round(pairs, busy["chunks"], parent, model)
    base = _likelihood(pairs, parent, model)
    rng = np.random.default_rng(0)
    # A child's score at its parent: what the assignment loses when it leaves.
    for c in rng.choice(np.flatnonzero(parent >= 0), 40, replace=False):
        alone = parent.copy()
        alone[c] = -1
        assert here[c] == pytest.approx(base - _likelihood(pairs, alone, model), abs=1e-6)
    # A proposal's gain: what the assignment gains when it alone is applied.
    swaps = np.flatnonzero(proposals.other >= 0)
    singles = np.flatnonzero((proposals.other < 0) & (proposals.child >= 0))
    assert swaps.size > 0
    assert singles.size > 0
    for i in np.concatenate(
        [rng.choice(singles, 30, replace=False), rng.choice(swaps, min(30, swaps.size), replace=False)]
    ):
        moved = _applied(parent, proposals, i, pairs.t_call)
        assert proposals.gain[i] == pytest.approx(_likelihood(pairs, moved, model) - base, abs=1e-6)


def test_a_round_raises_the_likelihood_by_the_sum_of_its_moves(busy) -> None:
    # Moves that share no parent do not interact: applied together they gain exactly
    # what they gain apart.
    pairs, parent = busy["pairs"], busy["start"]
    model = ChainModel.learn(pairs, parent, busy["params"], busy["n_nodes"])
    moves = _round(pairs, busy["chunks"], parent, model)[0].independent(len(pairs))
    touched = np.concatenate([moves.dest, moves.source[moves.source >= 0]])
    assert np.unique(touched).size == touched.size
    after = _applied(parent, moves, np.arange(moves.gain.size), pairs.t_call)
    gain = _likelihood(pairs, after, model) - _likelihood(pairs, parent, model)
    assert moves.child.size > 50
    assert gain == pytest.approx(moves.gain.sum(), rel=1e-9)
    assert gain > 0


def test_the_true_assignment_barely_moves(busy) -> None:
    # Judged by the model learnt from itself, the truth is (almost) a fixed point.
    pairs, truth = busy["pairs"], busy["truth"]
    model = ChainModel.learn(pairs, truth, busy["params"], busy["n_nodes"])
    moves = _round(pairs, busy["chunks"], truth, model)[0].independent(len(pairs))
    assert moves.child.size + (moves.other >= 0).sum() <= 0.005 * len(pairs)


def _links(result, truth: np.ndarray) -> float:
    kid = truth >= 0
    return float(np.mean(result.parent[kid] == truth[kid]))


@pytest.fixture(scope="module")
def crowded():
    # Parallelism 15, delays varying by 5%: sibling rounds leave a fifth of the links wrong.
    cfg = synth.load_config(SAMPLES / "multitier-skewed.toml")
    cfg = synth.with_delay_spread(replace(cfg, messages=20_000, parallelism=15.0, seed=7), 0.05)
    trace = synth.generate_table(cfg)[0]
    return trace, true_pairs(trace)[1]


def test_chain_rounds_find_more_true_parents(crowded) -> None:
    trace, truth = crowded
    kw = {"board": "joint", "density": True, "rounds": 2, "siblings": 3}
    before = infer_nesting(trace, "paper", **kw)
    after = infer_nesting(trace, "paper", chains=5, **kw)
    assert _links(after, truth) > _links(before, truth) + 0.08, (_links(before, truth), _links(after, truth))
    # Fewer false patterns: childless application servers and their neighbours with
    # three queries were the scoreboards' typical mistake.
    assert len(after.patterns) < 0.6 * len(before.patterns)
    doc = after.to_json()
    assert 1 <= doc["stats"]["chain_rounds_run"] <= 5
    # Confidence ranks right links above wrong ones.
    right = after.parent == truth
    assert after.confidence[right].mean() > after.confidence[~right].mean()
    assert np.all((after.confidence > 0) & (after.confidence <= 1))


CALLER_DECIDES = """
# S calls X when A called it, and nobody when B did.
nodes = ["client", "A", "B", "S", "X"]
[trace]
seed = 6
messages = 20000
parallelism = 15
[[tracelet]]
name = "via-a"
client = "client"
think_s = [0.0, 0.05]
[[tracelet.call]]
id = "a"
to = "A"
before_s = [0.002, 0.0005]
[[tracelet.call]]
id = "s"
parent = "a"
to = "S"
before_s = [0.002, 0.0005]
after_s = [0.001, 0.0002]
[[tracelet.call]]
id = "x"
parent = "s"
to = "X"
before_s = [0.003, 0.0008]
[[tracelet]]
name = "via-b"
client = "client"
think_s = [0.0, 0.05]
[[tracelet.call]]
id = "b"
to = "B"
before_s = [0.002, 0.0005]
[[tracelet.call]]
id = "s"
parent = "b"
to = "S"
before_s = [0.006, 0.0015]
"""


def test_chain_rounds_learn_what_each_caller_makes_a_node_do() -> None:
    # The chains are learnt per caller: a model blind to the caller would hand X calls
    # to S's visits from B, and leave visits from A childless.
    trace, truth = synth.generate_table(synth.parse_config(CALLER_DECIDES))
    found = {p.shape_text: p.count for p in infer_nesting(trace).patterns}  # the default: chain rounds
    true = {p["id"]: p["count"] for p in truth["patterns"]}
    assert len(true) == 2
    via_a, via_b = "client>A(A>S(S>X))", "client>B(B>S)"
    assert found[via_a] + found[via_b] >= 0.97 * sum(true.values())
    for wrong in ("client>A(A>S)", "client>B(B>S(S>X))"):
        assert found.get(wrong, 0) < 0.03 * sum(true.values()), (wrong, found.get(wrong))


def test_chain_rounds_keep_a_serial_trace_exact(serial_trace) -> None:
    table, truth = serial_trace
    r = infer_nesting(table, "paper", board="joint", density=True, rounds=1, siblings=1, chains=3)
    assert {p.id: p.count for p in r.patterns} == {p["id"]: p["count"] for p in truth["patterns"]}
    assert r.to_json()["stats"]["chain_rounds_run"] == 1  # nothing to move


def test_chain_rounds_with_nothing_to_choose(h) -> None:
    # One call, no candidates; and calls that hold each other under a tolerance.
    one = h.trace([(0, "call", "a", "b", 1), (5, "return", "b", "a", 1)])
    assert infer_nesting(one, "paper", chains=3).patterns[0].count == 1
    loop = h.trace(
        [
            (0, "call", "a", "b", 1),
            (0, "call", "b", "a", 2),
            (10, "return", "b", "a", 1),
            (10, "return", "a", "b", 2),
        ]
    )
    r = infer_nesting(loop, "paper", tolerance_s=0.001, chains=3)
    # The loop is cut once; the call cut out of it is not moved back in.
    assert sorted(r.parent.tolist()) == [-1, 0]
    assert r.to_json()["stats"]["chain_rounds_run"] == 1
    assert sum(p.count for p in r.patterns) == 1


def _random_pairs(rng: np.random.Generator) -> tuple[CallPairs, int]:
    n, nodes = int(rng.integers(2, 40)), int(rng.integers(2, 4))
    caller = rng.integers(0, nodes, n)
    callee = (caller + 1 + rng.integers(0, nodes - 1, n)) % nodes
    t_call = np.sort(rng.integers(0, 100, n))
    length = rng.integers(0, 33, n)
    length[rng.random(n) < 0.3] = 0  # zero-length calls
    return _pairs(caller, callee, t_call, t_call + length), nodes


@pytest.mark.parametrize("seed", range(40))
def test_gains_match_brute_force_under_tolerance_ties_and_any_budget(seed: int) -> None:
    # Random small pair sets: equal times, zero-length and overlapping calls, a skew
    # tolerance, candidates kept or enumerated again per pass, roots among children,
    # and a model learnt from another assignment than the one judged.
    rng = np.random.default_rng(seed)
    pairs, nodes = _random_pairs(rng)
    params = NestingParams(bin_min_s=1e-9, bin_base=1.5)
    tol = int(rng.choice([0, 5]))
    chunks = CandidateChunks(
        pairs, tol, Scoreboard(params, nodes), siblings=True, budget=int(rng.choice([1, 1 << 30]))
    )
    candidates: dict[int, list[int]] = {}
    for ch in chunks:
        for c, q in zip(ch.c.tolist(), ch.par.tolist(), strict=True):
            candidates.setdefault(c, []).append(q)
    parent = np.full(len(pairs), -1)
    other = parent.copy()
    for c, qs in candidates.items():
        parent[c] = rng.choice(qs) if rng.random() < 0.9 else -1
        other[c] = rng.choice(qs)
    model = ChainModel.learn(pairs, other, params, nodes)
    proposals, here, _ = _round(pairs, chunks, parent, model)
    base = _likelihood(pairs, parent, model)
    for c in np.flatnonzero(parent >= 0):
        alone = parent.copy()
        alone[c] = -1
        assert here[c] == pytest.approx(base - _likelihood(pairs, alone, model), abs=1e-6)
    assert np.all(np.isfinite(proposals.gain))
    assert np.all(parent[proposals.child] >= 0)  # roots stay roots
    for i in range(proposals.gain.size):
        moved = _applied(parent, proposals, i, pairs.t_call)
        assert proposals.gain[i] == pytest.approx(_likelihood(pairs, moved, model) - base, abs=1e-6)


def test_an_unseen_edge_scores_below_every_learnt_one(busy) -> None:
    model = ChainModel.learn(busy["pairs"], busy["start"], busy["params"], busy["n_nodes"])
    assert model.unseen < model.values.min()
    assert model.lookup(np.array([model.keys.max() + 1, 0]))[0] == model.unseen


def test_too_many_nodes_for_chain_keys_is_refused(busy) -> None:
    with pytest.raises(ParameterError, match="too many for chain rounds"):
        chain_rounds(busy["pairs"], busy["chunks"], busy["start"], busy["params"], 200_000, 1)


@pytest.mark.parametrize("value", [-1, 101, 1.5])
def test_bad_chain_round_counts(serial_trace, value) -> None:
    with pytest.raises(ParameterError, match="chains"):
        infer_nesting(serial_trace[0], "paper", chains=value)


def test_the_compiled_bins_are_the_bins_of_numpy() -> None:
    # The compiled loop counts bin edges found by bisection on delay_bins itself: every
    # delay, tiny to hours, positive or negative, lands in the bin numpy gives it.
    from infer._chainjit import _bin, bin_edges
    from infer.candidates import delay_bins

    rng = np.random.default_rng(5)
    for params in (NestingParams(), NestingParams(bin_min_s=1e-9, bin_base=1.5)):
        edges = bin_edges(lambda d, p=params: delay_bins(d, p), params.n_bins)
        mag = np.concatenate(
            [np.arange(0, 3000), rng.integers(0, 7_200 * 10**9, 20_000), edges, edges - 1, edges + 1]
        )
        delays = np.concatenate([mag, -mag]).astype(np.int64)
        got = np.array([_bin(d, edges, np.int64(params.n_bins)) for d in delays.tolist()])
        assert np.array_equal(got, delay_bins(delays, params))


FANOUT = Path(__file__).resolve().parents[2] / "samples" / "synth" / "gateway-fanout.toml"


def _gateway(seed: int) -> tuple[CallPairs, int, np.ndarray, ChainModel]:
    """A small gateway trace that fans out: its pairs, node count, the fast preset's
    parents and the chain model learnt from them."""
    cfg = replace(synth.load_config(FANOUT), messages=4_000, parallelism=6.0, seed=seed)
    trace = synth.generate_table(cfg)[0]
    nodes = node_codes(trace)
    pairs = match_calls(trace, nodes)
    parent = infer_nesting(trace, "fast").parent
    return pairs, len(nodes.names), parent, ChainModel.learn(pairs, parent, NestingParams(), len(nodes.names))


def test_runs_of_calls_made_at_once_move_together_by_their_exact_gain() -> None:
    # On a gateway that fans out, a round proposes moving runs of calls made at once;
    # each run's gain is the change in the likelihood of the whole assignment.
    pairs, n_nodes, start, model = _gateway(2)
    chunks = CandidateChunks(pairs, 0, Scoreboard(NestingParams(), n_nodes), siblings=True)
    proposals = _round(pairs, chunks, start, model)[0]
    runs = np.flatnonzero(proposals.count > 1)
    assert runs.size > 5
    base = _likelihood(pairs, start, model)
    for i in runs[:40]:
        moved = _applied(start, proposals, i, pairs.t_call)
        assert proposals.gain[i] == pytest.approx(_likelihood(pairs, moved, model) - base, abs=1e-6)


def test_the_compiled_chains_are_the_numpy_chains() -> None:
    # Every candidate's spliced chain scored by the compiled loop the rounds use and by
    # the same model in numpy, on a gateway that fans out (groups and joins).
    from infer.chains import _Members

    pairs, n_nodes, parent, model = _gateway(3)
    for ch in CandidateChunks(pairs, 0, Scoreboard(NestingParams(), n_nodes), siblings=True):
        c, par, group, members = _Members.of_chunk(ch, parent)
        insert, rank, remove = members.toggled()
        compiled = model.spliced_likelihood(pairs, par, group, c, members, insert, rank, remove)
        spliced = members.spliced(c, group, insert=insert, insert_rank=rank, remove_rank=remove)
        assert compiled == pytest.approx(model.chain_likelihood(pairs, par, *spliced), abs=1e-9)


@pytest.mark.parametrize("compiled", [True, False])
def test_whole_tuples_scored_by_the_loop_are_the_numpy_chains(compiled: bool, monkeypatch) -> None:
    # Random tuples of children (empty ones, calls made at once, joins): each visit's
    # chain with exactly those children, by the loop request rounds use (compiled and
    # as Python) and by the model in numpy.
    import infer.chains as chains
    from tracefmt.compiled import python_twin

    if not compiled:
        monkeypatch.setattr(chains, "_kernels", lambda n: python_twin("infer._chainjit"))
    pairs, _, _, model = _gateway(4)
    rng = np.random.default_rng(4)
    owner = rng.integers(0, len(pairs), 3_000)
    lengths = rng.integers(0, 6, owner.size)
    seq = np.repeat(np.arange(owner.size), lengths)
    kids = rng.integers(0, len(pairs), seq.size)
    kids = kids[np.lexsort((kids, pairs.t_call[kids], seq))]
    start = np.concatenate([[0], np.cumsum(lengths)])
    got = model.tuples_likelihood(pairs, owner, kids, start)
    assert (lengths == 0).any()
    assert (lengths >= 4).any()
    assert got == pytest.approx(model.chain_likelihood(pairs, owner, kids, seq), abs=1e-9)


#: How each lookup form is forced: the chain module's thresholds.
_LOOKUP_FORMS = {
    "every cell": {"_FLAT_CELLS": 1 << 30},
    "rows of learnt heads": {"_FLAT_CELLS": 0, "_FLAT_PER_PAIR": 0},
    "search": {"DENSE_TABLE": 0},
}


@pytest.mark.parametrize("form", list(_LOOKUP_FORMS))
def test_every_lookup_form_gives_the_same_scores_and_answer(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The chain model looks a cell up in a table of every cell (keys spanning few
    # cells), in rows of the heads it learnt (many nodes), or by searching its keys
    # (too many heads): the same values for every cell (learnt or not, past the last
    # key too), so the same compiled chain scores to the bit, after a trip to a worker
    # too, and the same parents and confidences.
    import pickle

    import infer.chains as chains
    from infer.chains import _Members

    cfg = replace(synth.load_config(FANOUT), messages=3_000, parallelism=6.0, seed=4)
    trace = synth.generate_table(cfg)[0]
    nodes = node_codes(trace)
    n_nodes = len(nodes.names)
    pairs = match_calls(trace, nodes)
    with monkeypatch.context() as m:
        m.setattr(chains, "DENSE_TABLE", 0)
        plain = infer_nesting(trace, "fast")
        searched = ChainModel.learn(pairs, plain.parent, NestingParams(), n_nodes)
    assert searched.table is None
    rng = np.random.default_rng(5)
    cells = np.concatenate(
        [
            searched.keys,
            searched.keys + 1,
            rng.integers(0, 6 * n_nodes**3 * 2 * NestingParams().n_bins, 50_000),
            searched.cells(pairs, *chain_edges(pairs, plain.parent)),
        ]
    )
    chunks = list(CandidateChunks(pairs, 0, Scoreboard(NestingParams(), n_nodes), siblings=True))

    def scores(model: ChainModel) -> list[np.ndarray]:
        out = []
        for ch in chunks:
            c, par, group, members = _Members.of_chunk(ch, plain.parent)
            insert, rank, remove = members.toggled()
            out.append(model.spliced_likelihood(pairs, par, group, c, members, insert, rank, remove))
        return out

    expected = scores(searched)
    for name, value in _LOOKUP_FORMS[form].items():
        monkeypatch.setattr(chains, name, value)
    model = ChainModel.learn(pairs, plain.parent, NestingParams(), n_nodes)
    assert (model.table is None) == (form == "search")
    assert (model.slot is not None) == (form == "rows of learnt heads")
    assert np.array_equal(model.lookup(cells), searched.lookup(cells))
    for got in (scores(model), scores(pickle.loads(pickle.dumps(model)))):
        assert all(np.array_equal(a, b) for a, b in zip(got, expected, strict=True))
    again = infer_nesting(trace, "fast")
    assert np.array_equal(again.parent, plain.parent)
    assert np.array_equal(again.confidence, plain.confidence)


def test_log_odds_weigh_every_neighbour_by_its_likelihood(busy) -> None:
    # A call's odds are against every assignment that changes its parent by one
    # proposal: each other candidate parent (brute force: the whole assignment with the
    # call moved there), each swap and each run move it is in (their gains are checked
    # against whole assignments above).
    pairs, parent = busy["pairs"], busy["start"]
    model = ChainModel.learn(pairs, parent, busy["params"], busy["n_nodes"])
    proposals, here, others = _round(pairs, busy["chunks"], parent, model)
    log_odds = neighbourhood_log_odds(pairs, parent, proposals, here, others)
    assert np.all(np.isposinf(log_odds[parent < 0]))
    base = _likelihood(pairs, parent, model)
    candidates: dict[int, set[int]] = {}
    for ch in busy["chunks"]:
        for c, q in zip(ch.c.tolist(), ch.par.tolist(), strict=True):
            candidates.setdefault(c, set()).add(q)
    rng = np.random.default_rng(1)
    tested = 0
    for c in rng.choice(np.flatnonzero(parent >= 0), 60, replace=False):
        mass = 0.0
        for q in candidates.get(int(c), set()) - {int(parent[c])}:
            moved = parent.copy()
            moved[c] = q
            mass += np.exp(_likelihood(pairs, moved, model) - base)
        swaps = (proposals.other >= 0) & ((proposals.other == c) | (proposals.child == c))
        mass += float(np.exp(proposals.gain[swaps]).sum())
        for i in np.flatnonzero(proposals.count > 1):
            if (_applied(parent, proposals, i, pairs.t_call) != parent)[c]:
                mass += np.exp(proposals.gain[i])
        if mass == 0.0:
            assert np.isposinf(log_odds[c])
            continue
        tested += 1
        assert log_odds[c] == pytest.approx(-np.log(mass), abs=1e-6)
    assert tested > 30


def test_compiled_loops_cut_among_threads_give_the_one_thread_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    # The chain scores and the run moves' gains are computed a slice per thread: every
    # entry on its own, so the answer of three threads (every call cut in three, runs
    # of calls made at once cut through), is the answer of one to the last bit.
    import tracefmt.cluster as cluster

    cfg = replace(synth.load_config(FANOUT), messages=3_000, parallelism=6.0, seed=4)
    trace = synth.generate_table(cfg)[0]
    calls: list[int] = []
    real_split = cluster.split_evenly

    def counted(n: int, parts: int) -> list[tuple[int, int]]:
        calls.append(parts)
        return real_split(n, parts)

    with monkeypatch.context() as m:
        m.setattr(cluster, "local_threads", lambda: 1)
        one = infer_nesting(trace)
    with monkeypatch.context() as m:
        m.setattr(cluster, "local_threads", lambda: 3)
        m.setattr(cluster, "MIN_PER_THREAD", 7)
        m.setattr(cluster, "split_evenly", counted)
        three = infer_nesting(trace)
    assert 3 in calls  # it did cut
    assert np.array_equal(one.parent, three.parent)
    assert np.array_equal(one.confidence, three.confidence)
    assert [p.to_json() for p in one.patterns] == [p.to_json() for p in three.patterns]


def _same_model(a: ChainModel, b: ChainModel) -> None:
    for f in ("keys", "values", "choice"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    assert a.unseen == b.unseen
    assert a.own_log_likelihood == b.own_log_likelihood
    assert all(np.array_equal(x, y) for x, y in zip(a.counted, b.counted, strict=True))


def test_a_model_counted_again_where_calls_moved_is_the_model_learnt_whole(
    busy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``relearn`` takes off the old chains of the calls whose children changed and
    adds their new ones: the model is the one learnt from scratch, to the bit, for
    moves that empty a parent, fill a childless one, make roots and undo roots."""
    from infer import chains

    # Counted again however many moved (past a quarter it would learn the whole).
    monkeypatch.setattr(chains, "_RELEARN_MOVED", 1)
    pairs, params, n_nodes = busy["pairs"], busy["params"], busy["n_nodes"]
    rng = np.random.default_rng(5)
    before = busy["start"].copy()
    model = ChainModel.learn(pairs, before, params, n_nodes)
    for step in range(4):
        after = before.copy()
        moved = rng.choice(len(pairs), 40 + 200 * step, replace=False)
        after[moved] = busy["truth"][moved]  # some become roots, some stop being roots
        after[moved[:5]] = -1
        model = model.relearn(pairs, before, after)
        _same_model(model, ChainModel.learn(pairs, after, params, n_nodes))
        before = after
    assert model.relearn(pairs, before, before.copy()) is model  # nothing moved


def test_rounds_with_models_counted_again_give_the_answer_of_models_learnt_whole(
    busy, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infer import chains

    monkeypatch.setattr(chains, "_RELEARN_MOVED", 1)  # counted again, however many moved
    pairs, params = busy["pairs"], NestingParams(board="joint", density=True, chains=6)

    def run() -> list:
        return list(chains.chain_stages(pairs, busy["chunks"], busy["start"], params, busy["n_nodes"]))

    fast = run()
    monkeypatch.setattr(
        ChainModel,
        "relearn",
        lambda self, p, before, after: ChainModel.learn(p, after, params, busy["n_nodes"]),
    )
    whole = run()
    assert len(fast) == len(whole) >= 3
    for (pa, la, ma, ga), (pb, lb, mb, gb) in zip(fast, whole, strict=True):
        assert np.array_equal(pa, pb)
        assert np.array_equal(la, lb)
        assert (ma, ga) == (mb, gb)


def test_chain_rounds_in_python_give_the_compiled_answer_to_the_last_bit(monkeypatch) -> None:
    from infer import chains

    cfg = synth.load_config(Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml")
    t = synth.generate_table(replace(cfg, messages=3_000, parallelism=10.0, seed=9))[0]
    monkeypatch.setattr(chains, "PLAIN_BELOW", 0)
    compiled = infer_nesting(t)
    monkeypatch.setattr(chains, "PLAIN_BELOW", 10**9)
    plain = infer_nesting(t)
    assert compiled.to_json()["stats"]["chain_rounds_run"] > 0
    assert np.array_equal(compiled.parent, plain.parent)
    assert np.array_equal(compiled.confidence, plain.confidence)
    assert compiled.to_json() == plain.to_json()
