"""Phase 1 of nesting: calls matched with their returns (``infer.callpairs``)."""

from __future__ import annotations

from collections import defaultdict, deque
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import synth
from infer import match_calls, node_codes
from tracefmt import sort_trace, validate_trace


def pairs_of(table: pa.Table, *, use_ids: bool = True) -> Any:
    t = sort_trace(validate_trace(table))
    return match_calls(t, node_codes(t), use_ids=use_ids)


def times(p: Any) -> list[tuple[int, int]]:
    return list(zip(p.t_call.tolist(), p.t_return.tolist(), strict=True))


def rows(p: Any) -> list[tuple[int, int]]:
    return list(zip(p.call_row.tolist(), p.return_row.tolist(), strict=True))


# --- node codes ---------------------------------------------------------------------------


def test_node_codes_one_numbering_for_sender_and_receiver(h) -> None:
    # "client" only sends, "db" only receives: the two dictionaries differ.
    t = h.trace(
        [
            (1, "call", "client", "web", 1),
            (2, "call", "web", "db", 2),
            (3, "return", "db", "web", 2),
            (4, "return", "web", "client", 1),
            (5, "send", "web", "db", None),
        ]
    )
    nc = node_codes(t)
    assert nc.names == ["client", "db", "web"]
    assert [nc.names[i] for i in nc.sender] == t["sender"].cast(pa.string()).to_pylist()
    assert [nc.names[i] for i in nc.receiver] == t["receiver"].cast(pa.string()).to_pylist()


def test_node_codes_of_a_chunked_table(h) -> None:
    a = h.trace([(1, "call", "x", "y", 1), (2, "return", "y", "x", 1)])
    b = h.trace([(3, "call", "z", "x", None), (4, "return", "x", "z", None)])
    t = pa.concat_tables([a, b])
    assert t["sender"].num_chunks == 2
    nc = node_codes(t)
    assert nc.names == ["x", "y", "z"]
    assert [nc.names[i] for i in nc.sender] == ["x", "y", "z", "x"]
    assert [nc.names[i] for i in nc.receiver] == ["y", "x", "x", "z"]


def test_node_codes_of_an_empty_trace(h) -> None:
    nc = node_codes(h.trace([]))
    assert nc.names == []
    assert nc.sender.size == 0
    assert nc.receiver.size == 0


# --- hand-built traces --------------------------------------------------------------------


def test_fifo_without_ids(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", None),
            (2, "call", "A", "B", None),
            (3, "return", "B", "A", None),
            (4, "return", "B", "A", None),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 3), (2, 4)]
    assert rows(p) == [(0, 2), (1, 3)]
    assert (p.unmatched_calls, p.unmatched_returns, p.sends) == (0, 0, 0)
    assert len(p) == 2


def test_ids_match_out_of_order_returns(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", 10),
            (2, "call", "A", "B", 11),
            (3, "return", "B", "A", 11),
            (4, "return", "B", "A", 10),
        ]
    )
    assert times(pairs_of(t)) == [(1, 4), (2, 3)]
    # Ignoring the ids, the earliest open call is closed first.
    assert times(pairs_of(t, use_ids=False)) == [(1, 3), (2, 4)]


def test_caller_and_callee_of_a_pair(h) -> None:
    t = h.trace([(1, "call", "web", "app", None), (2, "return", "app", "web", None)])
    p = pairs_of(t)
    names = node_codes(t).names
    assert (names[int(p.caller[0])], names[int(p.callee[0])]) == ("web", "app")


def test_a_return_must_come_from_the_callee(h) -> None:
    # A "return" A->B answers a call B->A, not the call A->B.
    t = h.trace([(1, "call", "A", "B", None), (2, "return", "A", "B", None)])
    p = pairs_of(t)
    assert len(p) == 0
    assert (p.unmatched_calls, p.unmatched_returns) == (1, 1)


def test_pairs_between_different_nodes_do_not_mix(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", None),
            (2, "call", "C", "B", None),
            (3, "return", "B", "C", None),
            (4, "return", "B", "A", None),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 4), (2, 3)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 0)


@pytest.mark.parametrize("ident", [None, 7])
def test_return_without_open_call_does_not_consume_a_later_call(h, ident: int | None) -> None:
    t = h.trace(
        [
            (1, "return", "B", "A", ident),
            (2, "call", "A", "B", ident),
            (3, "return", "B", "A", ident),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(2, 3)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 1)


def test_extra_return_in_the_middle(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", None),
            (2, "return", "B", "A", None),
            (3, "return", "B", "A", None),  # a duplicate: nothing open
            (4, "return", "B", "A", None),  # another one
            (5, "call", "A", "B", None),
            (6, "return", "B", "A", None),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 2), (5, 6)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 2)


def test_extra_returns_of_one_pair_do_not_affect_another(h) -> None:
    # The open-call count restarts per caller/callee pair.
    t = h.trace(
        [
            (1, "return", "B", "A", None),
            (2, "return", "B", "A", None),
            (3, "return", "B", "A", None),
            (4, "call", "C", "D", None),
            (5, "call", "A", "B", None),
            (6, "return", "D", "C", None),
            (7, "return", "B", "A", None),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(4, 6), (5, 7)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 3)


def test_call_never_returned(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", 1),
            (2, "call", "A", "B", 2),
            (3, "return", "B", "A", 2),
            (4, "call", "A", "C", None),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(2, 3)]
    assert (p.unmatched_calls, p.unmatched_returns) == (2, 0)


def test_call_never_returned_without_ids_is_the_last_one(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", None),
            (2, "call", "A", "B", None),
            (3, "return", "B", "A", None),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 3)]
    assert (p.unmatched_calls, p.unmatched_returns) == (1, 0)


def test_all_zero_ids_are_missing_ids(h) -> None:
    # A->B sends id 0 on calls and no id on returns: if 0 were an id nothing would pair.
    t = h.trace(
        [
            (1, "call", "A", "B", 0),
            (2, "call", "A", "B", 0),
            (3, "return", "B", "A", None),
            (4, "return", "B", "A", 0),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 3), (2, 4)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 0)


def test_zero_ids_of_one_pair_are_missing_even_if_another_pair_has_ids(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", 0),
            (2, "call", "C", "D", 5),
            (3, "call", "C", "D", 6),
            (4, "return", "B", "A", None),
            (5, "return", "D", "C", 6),
            (6, "return", "D", "C", 5),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 4), (2, 6), (3, 5)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 0)


def test_zero_is_an_id_when_the_pair_has_other_ids(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", 0),
            (2, "call", "A", "B", 5),
            (3, "return", "B", "A", 5),
            (4, "return", "B", "A", 0),
        ]
    )
    assert times(pairs_of(t)) == [(1, 4), (2, 3)]


def test_reused_ids_serial(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", 7),
            (2, "return", "B", "A", 7),
            (3, "call", "A", "B", 7),
            (4, "return", "B", "A", 7),
            (5, "call", "A", "B", 7),
            (6, "call", "A", "B", 8),
            (7, "return", "B", "A", 8),
            (8, "return", "B", "A", 7),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 2), (3, 4), (5, 8), (6, 7)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 0)


def test_sends_are_counted_and_ignored(h) -> None:
    t = h.trace(
        [
            (1, "call", "A", "B", None),
            (2, "send", "B", "A", None),  # not a return
            (3, "send", "A", "B", None),
            (4, "return", "B", "A", None),
            (5, "send", "B", "C", 9),
        ]
    )
    p = pairs_of(t)
    assert times(p) == [(1, 4)]
    assert rows(p) == [(0, 3)]
    assert (p.unmatched_calls, p.unmatched_returns, p.sends) == (0, 0, 3)


@pytest.mark.parametrize("return_first", [False, True])
def test_zero_length_call_pairs(h, return_first: bool) -> None:
    msgs = [(5, "call", "A", "B", None), (5, "return", "B", "A", None)]
    if return_first:
        msgs.reverse()
    p = pairs_of(h.trace([(1, "call", "X", "Y", None), (2, "return", "Y", "X", None), *msgs]))
    assert times(p) == [(1, 2), (5, 5)]
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 0)


def test_zero_length_calls_in_a_row(h) -> None:
    t = h.trace(
        [
            (5, "call", "A", "B", 1),
            (5, "return", "B", "A", 1),
            (5, "call", "A", "B", 2),
            (5, "return", "B", "A", 2),
        ]
    )
    p = pairs_of(t)
    assert rows(p) == [(0, 1), (2, 3)]


def test_pairs_sorted_by_call_time_then_row(h) -> None:
    # Three calls at one instant (a parallel fan-out), to nodes named against row order.
    t = h.trace(
        [
            (1, "call", "A", "Z", None),
            (1, "call", "A", "M", None),
            (1, "call", "A", "B", None),
            (2, "return", "B", "A", None),
            (3, "return", "M", "A", None),
            (4, "return", "Z", "A", None),
        ]
    )
    p = pairs_of(t)
    assert p.call_row.tolist() == [0, 1, 2]
    assert p.return_row.tolist() == [5, 4, 3]


def test_unsorted_input_is_matched_in_time_order(h) -> None:
    t = h.trace(
        [
            (4, "return", "B", "A", None),
            (1, "call", "A", "B", None),
            (3, "return", "B", "A", None),
            (2, "call", "A", "B", None),
        ],
    )
    assert times(pairs_of(t)) == [(1, 3), (2, 4)]


# --- a reference implementation, on random message sequences ------------------------------


def reference_pairs(msgs: list[tuple[int, str, str, str, int | None]]) -> tuple[set, int, int]:
    """The documented rules, one message at a time: ids where a pair has nonzero ones,
    otherwise the earliest open call of the same caller/callee."""
    with_ids = defaultdict(bool)
    for _, op, s, r, i in msgs:
        pair = (s, r) if op == "call" else (r, s)
        if op != "send" and i is not None and i != 0:
            with_ids[pair] = True
    open_: dict[tuple, deque] = defaultdict(deque)
    found = set()
    lost_returns = 0
    for row, (_, op, s, r, i) in enumerate(msgs):
        if op == "send":
            continue
        pair = (s, r) if op == "call" else (r, s)
        key = (*pair, i if with_ids[pair] and i is not None else None)
        if op == "call":
            open_[key].append(row)
        elif open_[key]:
            found.add((open_[key].popleft(), row))
        else:
            lost_returns += 1
    lost_calls = sum(len(q) for q in open_.values())
    return found, lost_calls, lost_returns


message = st.tuples(
    st.sampled_from(["call", "return", "send"]),
    st.sampled_from(["A", "B", "C"]),
    st.sampled_from(["A", "B", "C"]),
    st.one_of(st.none(), st.integers(0, 3)),
)


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(message, max_size=40))
def test_matches_a_reference_implementation(h, msgs: list) -> None:
    rows_ = [(10 * (k + 1), op, s, r, i) for k, (op, s, r, i) in enumerate(msgs)]
    expect, lost_calls, lost_returns = reference_pairs(rows_)
    p = pairs_of(h.trace(rows_))
    assert set(rows(p)) == expect
    assert len(rows(p)) == len(expect)
    assert (p.unmatched_calls, p.unmatched_returns) == (lost_calls, lost_returns)
    assert p.sends == sum(op == "send" for _, op, *_ in rows_)
    assert np.all(np.diff(p.t_call) >= 0)


# --- synthetic traces with ground truth ---------------------------------------------------


def assert_pairs_are_true(table: pa.Table, p: Any, h) -> None:
    call = h.ints(table["true_call"])
    assert np.array_equal(call[p.call_row], call[p.return_row])
    ops = h.strings(table["op"])
    assert set(ops[p.call_row]) == {"call"}
    assert set(ops[p.return_row]) == {"return"}
    n_calls = int((ops == "call").sum())
    assert len(p) == n_calls
    assert np.unique(call[p.call_row]).size == n_calls
    assert (p.unmatched_calls, p.unmatched_returns) == (0, 0)


def test_unique_ids_match_every_true_call(parallel_trace, h) -> None:
    table, _ = parallel_trace
    tc = h.true_calls(table)
    # The trace must have returns out of call order between the same two nodes.
    out_of_order = 0
    for pair in set(zip(tc.caller.tolist(), tc.callee.tolist(), strict=True)):
        sel = (tc.caller == pair[0]) & (tc.callee == pair[1])
        order = np.argsort(tc.t_call[sel], kind="stable")
        out_of_order += int(np.sum(np.diff(tc.t_ret[sel][order]) < 0))
    assert out_of_order > 100
    p = pairs_of(table)
    assert_pairs_are_true(table, p, h)
    assert np.array_equal(p.t_call, table["timestamp"].cast(pa.int64()).to_numpy()[p.call_row])
    assert np.all(np.diff(p.t_call) >= 0)


@pytest.mark.parametrize(
    "faults",
    [
        '[faults.ids]\nmode = "missing"\nfraction = 1.0\n',
        '[faults.ids]\nmode = "missing"\nfraction = 0.5\n',
        '[faults.ids]\nmode = "zero"\n',
        '[faults.ids]\nmode = "reused"\nmodulus = 3\n',
    ],
    ids=["missing", "half-missing", "zero", "reused"],
)
def test_serial_trace_with_id_faults_matches_every_true_call(serial_toml: str, faults: str, h) -> None:
    text = serial_toml.replace("messages = 20000", "messages = 6000") + "\n" + faults
    table, _ = synth.generate_table(synth.parse_config(text))
    ids = h.ints(table["id"])
    if "zero" in faults:
        assert set(ids.tolist()) == {0}
    if "fraction = 1.0" in faults:
        assert set(ids.tolist()) == {-1}
    if "fraction = 0.5" in faults:
        assert 0.3 < float(np.mean(ids == -1)) < 0.7
    if "reused" in faults:
        assert len(set(ids.tolist())) <= 3
    assert_pairs_are_true(table, pairs_of(table), h)


@pytest.mark.parametrize(
    ("major_max", "minor_max"),
    [(10, 5), (10, 2**64 - 1), (2**50, 2**64 - 1), (2**50, 7)],
    ids=["packed", "ranked-ids", "lexsort-fallback", "wide-major"],
)
def test_group_order_is_a_stable_sort_by_major_then_minor(major_max: int, minor_max: int) -> None:
    from infer.callpairs import _group_order

    rng = np.random.default_rng(3)
    n = 2000
    major = rng.integers(0, 4, n) * (major_max // 3)
    minor = rng.choice(np.array([0, 1, minor_max // 2, minor_max], np.uint64), n)
    order, start = _group_order(major, minor)
    want = np.lexsort((minor, major))
    assert np.array_equal(order, want)
    keys = list(zip(major[want].tolist(), minor[want].tolist(), strict=True))
    assert start.tolist() == [i == 0 or keys[i] != keys[i - 1] for i in range(n)]
