"""Accuracy of inferred paths against the ground truth of a synthetic trace.

The true paths are rebuilt from the trace's truth columns (``true_call``,
``true_parent``) with the same aggregation code inference uses, so true and inferred
patterns share ids, and latencies are compared on the timestamps as written. A
convolution paths file is scored against every instance's messages in order, as linear
paths (:func:`evaluate_convolution`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from infer.calibration import reliability
from infer.callpairs import CallPairs, node_codes
from infer.patterns import Pattern, build_patterns, log_confidence_by
from tracefmt import (
    OP_CALL,
    OP_RETURN,
    OP_SEND,
    ParameterError,
    SchemaError,
    hop_delays_s,
    op_codes,
    sort_trace,
    validate_trace,
)

__all__ = [
    "DEFAULT_NS",
    "DEFAULT_TOLERANCES",
    "LinearTruth",
    "error_sources",
    "evaluate_convolution",
    "evaluate_paths",
    "true_linear_paths",
    "true_pairs",
    "true_parents",
    "true_patterns",
]

DEFAULT_NS = (1, 2, 3, 5, 10, 20)
DEFAULT_TOLERANCES = (0.0, 0.02, 0.06)


def _truth_columns(trace: pa.Table) -> None:
    missing = [c for c in ("true_call", "true_parent", "true_instance") if c not in trace.column_names]
    if missing:
        raise SchemaError(
            f"the trace has no ground truth (missing {', '.join(missing)}); evaluate against a trace "
            "made by wirepath synth"
        )


def true_pairs(trace: pa.Table) -> tuple[CallPairs, np.ndarray, list[str], np.ndarray]:
    """The true call pairs of a trace and their true parents (pair indices, -1 for roots).

    Returns ``(pairs, parent, node names, true_instance per pair)``; a call whose return
    is missing from the trace (lost) is not a pair; a child whose parent call is missing
    becomes a root.
    """
    _truth_columns(trace)
    trace = sort_trace(validate_trace(trace))
    nodes = node_codes(trace)
    ops = op_codes(trace)
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    uid = trace["true_call"].to_numpy().astype(np.int64)
    tpar = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    inst = trace["true_instance"].to_numpy().astype(np.int64)
    first = _first_point(trace)
    calls = np.flatnonzero((ops == OP_CALL) & first)
    rets = np.flatnonzero((ops == OP_RETURN) & first)
    r_order = rets[np.argsort(uid[rets], kind="stable")]
    pos = np.searchsorted(uid[r_order], uid[calls])
    pos = np.minimum(pos, max(r_order.size - 1, 0))
    closed = (
        (r_order.size > 0) & (uid[r_order][pos] == uid[calls]) if r_order.size else np.zeros(calls.size, bool)
    )
    pairs = CallPairs.from_rows(
        nodes,
        ts,
        calls[closed],
        r_order[pos][closed],
        unmatched_calls=int(calls.size - closed.sum()),
        unmatched_returns=int(rets.size - closed.sum()),
        sends=0,
    )
    call_row = pairs.call_row
    pair_uid = uid[call_row]
    by_uid = np.argsort(pair_uid, kind="stable")
    want = tpar[call_row]
    at = np.minimum(np.searchsorted(pair_uid[by_uid], want), max(by_uid.size - 1, 0))
    found = by_uid.size > 0
    parent = (
        np.where(found & (pair_uid[by_uid][at] == want), by_uid[at], -1) if found else np.zeros(0, np.int64)
    )
    return pairs, parent.astype(np.int64), nodes.names, inst[call_row]


def true_parents(pairs: CallPairs, trace: pa.Table) -> np.ndarray:
    """The true parent of each of ``pairs`` (an inference's call pairs of ``trace``), as
    an index among them (-1: a root, or a parent that is not among them)."""
    tpairs, tparent, _, _ = true_pairs(trace)
    n = len(pairs)
    index = np.full(trace.num_rows, -1, np.int64)
    index[pairs.call_row] = np.arange(n)
    mine = index[tpairs.call_row]  # each true pair's index among the inferred pairs
    truth = np.full(n, -1, np.int64)
    ok = mine >= 0
    truth[mine[ok]] = np.where(tparent[ok] >= 0, mine[np.maximum(tparent[ok], 0)], -1)
    return truth


def error_sources(result: Any, trace: pa.Table) -> dict[str, Any]:
    """Whether a nesting answer's mistakes are the model's or the search's.

    Returns the answer's and the truth's mean log-likelihood per call under the model
    the run learnt (its last answer's chain model, and with request rounds the visit
    shapes, ``infer.request_model``):
    the truth scoring lower is *model error*, the model prefers the wrong answer; and
    the share of calls right when the run's chain and request rounds start from the
    truth (``kept``) beside the answer's (``right``): the truth scoring higher yet
    the answer falling short is *search error*. ``verdict`` says which (``"model"``,
    ``"search"``, or ``"neither"``).
    """
    from infer.candidates import all_candidates
    from infer.chains import ChainModel
    from infer.nesting import call_operations, nesting_stages
    from infer.request_model import Grammar, call_kinds, request_log_likelihood, sure_visits

    pairs, params, n_nodes = result.pairs, result.params, len(result.nodes)
    truth = true_parents(pairs, trace)
    tolerance = result.trace_info.get("tolerance_s", params.tolerance_s)
    tol_ns = round(tolerance * 1e9)
    cand_c, cand_p = all_candidates(pairs, tol_ns)
    operations = call_operations(trace, pairs)
    labels = None if operations is None else operations[0]
    vtype, klass = call_kinds(pairs, labels)
    model = ChainModel.learn(pairs, result.parent, params, n_nodes)
    # The model the run judged by: the chains, and the visit shapes where it ran request rounds.
    grammar = None
    if params.request_rounds:
        grammar = Grammar.learn(vtype, klass, result.parent, sure_visits(len(pairs), cand_c, cand_p))
    same = params.with_overrides(tolerance_s=tolerance, auto_tolerance=False)
    *_, last = nesting_stages(pairs, n_nodes, same, labels=labels, start=truth)
    kid = truth >= 0
    out: dict[str, Any] = {
        "answer_ll": request_log_likelihood(pairs, result.parent, model, grammar, vtype, klass),
        "truth_ll": request_log_likelihood(pairs, truth, model, grammar, vtype, klass),
        "right": float(np.mean(result.parent[kid] == truth[kid])),
        "kept": float(np.mean(last.parent[kid] == truth[kid])),
    }
    worse = out["truth_ll"] < out["answer_ll"]
    out["verdict"] = "model" if worse else "search" if out["kept"] > out["right"] else "neither"
    return out


def true_patterns(trace: pa.Table) -> list[Pattern]:
    """True patterns of a synthetic trace, sorted by count."""
    pairs, parent, names, _ = true_pairs(trace)
    return build_patterns(pairs, parent, names, sort="count")[0]


def _visit_values(root: dict[str, Any], key: str) -> list[float]:
    out: list[float] = []
    stack = [root]  # preorder with a stack of its own: call chains run deep
    while stack:
        v = stack.pop()
        if v.get(key) is not None:
            out.append(float(v[key]["mean"]))
        stack.extend(reversed(v.get("children", [])))
    return out


def evaluate_paths(
    paths: dict[str, Any],
    trace: pa.Table,
    *,
    instances: pa.Table | None = None,
    ns: tuple[int, ...] = DEFAULT_NS,
    tolerances: tuple[float, ...] = DEFAULT_TOLERANCES,
) -> dict[str, Any]:
    """Score a paths file against a trace with ground truth (the accuracy report of ``docs/files.md``).

    Parameters
    ----------
    paths : dict
        A paths file (``NestingResult.to_json()``).
    trace : pyarrow.Table
        The trace the paths were inferred from, with its truth columns.
    instances : pyarrow.Table, optional
        ``NestingResult.instances_table()``; needed for the instance, message and call
        scores (they are None without it).
    ns, tolerances :
        Top-N sizes and count tolerances of the top-N missing rate.

    Returns
    -------
    dict
        The accuracy report (``docs/files.md``). ``instances`` also holds ``fully_right``,
        the true instances (requests) whose every call got its true parent, and
        ``fully_right_rate``, their share (TraceWeaver's "requests fully right"); a
        request stays fully right when a call of another request is wrongly attached
        to it, which does make its inferred instance inexact (``false_negatives``
        counts the true instances without an exact inferred one). ``calls`` counts
        the true calls given their true parent (``right_parent``,
        ``right_parent_rate``).

    A convolution paths file (``"algorithm": "convolution"``) is scored by
    :func:`evaluate_convolution`.
    """
    if paths.get("format") != "wirepath.paths/1":
        raise SchemaError(f"not a paths file (format {paths.get('format')!r}, expected 'wirepath.paths/1')")
    if paths.get("algorithm") == "convolution":
        if instances is not None:
            raise ParameterError("--instances scores nesting instances; a convolution paths file has none")
        return evaluate_convolution(paths, trace, ns=ns, tolerances=tolerances)
    trace = sort_trace(validate_trace(trace))
    pairs, parent, names, inst = true_pairs(trace)
    truth = build_patterns(pairs, parent, names, sort="count")[0]
    true_ids = {p.id: p for p in truth}
    inferred = paths.get("patterns", [])
    inf_ids = {p["id"]: p for p in inferred}
    report: dict[str, Any] = {
        "patterns": {
            "true": len(true_ids),
            "inferred": len(inf_ids),
            "false_negatives": len(set(true_ids) - set(inf_ids)),
            "false_positives": len(set(inf_ids) - set(true_ids)),
        },
        "top_n": _pattern_top_n([p.id for p in truth], inferred, ns, tolerances),
        "delay_error": _pattern_delay_error(true_ids, inf_ids),
    }
    report["instances"], report["messages"], report["calls"], verdicts = _instance_scores(
        trace, pairs.call_row, inst, instances
    )
    if verdicts is not None and "confidence" in instances.column_names:
        report["confidence"] = _confidence_scores(instances, *verdicts)
    return report


def _pattern_top_n(
    true_by_count: list[str],
    inferred: list[dict[str, Any]],
    ns: tuple[int, ...],
    tolerances: tuple[float, ...],
) -> list[dict[str, Any]]:
    """The N most frequent true patterns missing from the inferred ones within count
    tolerance ``t`` of the N-th."""
    inf_counts = sorted(((p["count"], p["id"]) for p in inferred), key=lambda cp: (-cp[0], cp[1]))
    top = []
    for n in ns:
        if n > len(true_by_count):
            continue
        wanted = set(true_by_count[:n])
        for tol in tolerances:
            if len(inf_counts) >= n:
                cut = inf_counts[n - 1][0] * (1.0 - tol)
                chosen = {i for c, i in inf_counts if c >= cut}
            else:
                chosen = {i for _, i in inf_counts}
            missing = len(wanted - chosen)
            top.append({"n": n, "missing": missing, "missing_rate": missing / n, "tolerance": tol})
    return top


def _pattern_delay_error(
    true_ids: dict[str, Pattern], inf_ids: dict[str, dict[str, Any]]
) -> dict[str, float | None]:
    """Relative error of the mean latency and delay of every visit of the patterns
    found, against the truth's: median and 90th percentile."""
    errors = []
    for pid, inf in inf_ids.items():
        if pid not in true_ids:
            continue
        t_json = true_ids[pid].to_json()["root"]
        for key in ("latency_s", "delay_s"):
            got, want = _visit_values(inf["root"], key), _visit_values(t_json, key)
            for g, w in zip(got, want, strict=True):
                if w > 0:
                    errors.append(abs(g - w) / w)
    if not errors:
        return {"median_rel": None, "p90_rel": None}
    return {"median_rel": float(np.median(errors)), "p90_rel": float(np.percentile(errors, 90))}


def _confidence_scores(
    instances: pa.Table, link_ok: np.ndarray, group: np.ndarray, exact: np.ndarray
) -> dict[str, Any]:
    """Stated confidence against the truth: per call given a parent (is the parent
    right?) and per inferred instance (the product of its calls' confidences: is the
    instance exactly one whole true request?), each as ``infer.calibration.reliability``."""
    conf = instances["confidence"].to_numpy()
    linked = instances["parent"].is_valid().to_numpy(zero_copy_only=False)
    if "instance_confidence" in instances.column_names:  # calibrated per instance
        stated = np.zeros(exact.size)
        stated[group] = instances["instance_confidence"].to_numpy()
    else:
        stated = np.exp(log_confidence_by(group, conf, exact.size))
    return {"calls": reliability(conf[linked], link_ok[linked]), "instances": reliability(stated, exact)}


def _same_trace(trace: pa.Table, instances: pa.Table) -> None:
    """Raise ``SchemaError`` unless every inferred pair's rows are, in ``trace``, a call
    from its caller to its callee and a return: instances of another trace would be
    scored against the wrong messages (or index past the end)."""
    call_row = instances["call_row"].to_numpy()
    return_row = instances["return_row"].to_numpy()
    if not call_row.size:
        return
    rows = np.concatenate([call_row, return_row])
    if int(rows.max()) >= trace.num_rows or int(rows.min()) < 0:
        raise SchemaError(
            f"the instances name rows beyond this trace's {trace.num_rows:,} messages: "
            "they were inferred from another trace"
        )
    ops = op_codes(trace)
    same = bool((ops[call_row] == OP_CALL).all()) and bool((ops[return_row] == OP_RETURN).all())
    for column, side in (("caller", "sender"), ("callee", "receiver")):
        if same and column in instances.column_names:  # tables written by wirepath have both
            same = trace[side].cast(pa.string()).take(call_row).equals(instances[column].cast(pa.string()))
    if not same:
        raise SchemaError(
            "the instances do not match this trace's calls and returns: they were inferred from another trace"
        )


def _instance_scores(
    trace: pa.Table, true_rows: np.ndarray, inst: np.ndarray, instances: pa.Table | None
) -> tuple[Any, Any, Any, Any]:
    """Instance, message and call scores, and the verdicts behind them: per inferred
    call whether it is right, its instance's number, and per instance whether it is
    exact (None without ``instances``).

    ``trace`` is sorted, ``true_rows`` the call row of every true pair and ``inst`` its
    true instance. One verdict decides every score: an inferred call is right when its
    parent is its true parent and its own return closes it. An inferred instance is
    *exact* when it is one whole true instance with every call right (instances and
    messages); a true instance is *fully right* when every one of its calls is right,
    whatever else was wrongly attached to it (TraceWeaver's "requests fully right").
    """
    n_pairs = true_rows.size
    true_ids, true_size = np.unique(inst, return_counts=True)
    true_instances = int(true_ids.size)
    true_messages = 2 * n_pairs
    if instances is None:
        return (*_unscored(true_instances, n_pairs), None)
    link_ok, group, my_true_inst = _link_verdicts(trace, instances)
    size, exact, t_min = _exact_instances(group, my_true_inst, link_ok, true_ids, true_size)
    n_groups = size.size
    recovered = int(np.unique(t_min[exact]).size)
    # Per true call: inferred, and right. A true instance is fully right when all are.
    right = np.isin(true_rows, instances["call_row"].to_numpy()[link_ok])
    wrong_in = np.bincount(np.searchsorted(true_ids, inst), weights=~right, minlength=true_instances)
    fully_right = int((wrong_in == 0).sum())
    inst_report = {
        "true": true_instances,
        "inferred": n_groups,
        "false_negatives": true_instances - recovered,
        "false_positives": int(n_groups - exact.sum()),
        "fully_right": fully_right,
        "fully_right_rate": fully_right / true_instances if true_instances else None,
    }
    msg_report = {
        "true": true_messages,
        "false_negatives": true_messages - int(2 * size[exact].sum()),
        "false_positives": int(2 * size[~exact].sum()),
    }
    n_right = int(right.sum())
    call_report = {
        "true": n_pairs,
        "right_parent": n_right,
        "right_parent_rate": n_right / n_pairs if n_pairs else None,
    }
    return inst_report, msg_report, call_report, (link_ok, group, exact)


def _unscored(true_instances: int, n_pairs: int) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The instance, message and call scores without inferred instances: the truth's side."""
    return (
        {
            "true": true_instances,
            "inferred": None,
            "false_negatives": None,
            "false_positives": None,
            "fully_right": None,
            "fully_right_rate": None,
        },
        {"true": 2 * n_pairs, "false_negatives": None, "false_positives": None},
        {"true": n_pairs, "right_parent": None, "right_parent_rate": None},
    )


def _link_verdicts(trace: pa.Table, instances: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per inferred call: whether it is right (its true parent, and closed by its own
    return), its instance's number (0, 1, ...) and its true instance."""
    uid = trace["true_call"].to_numpy().astype(np.int64)
    # The null fill reads back as -1 (ids of captures use all 64 bits and may read back
    # negative; only the id 2**64 - 1 itself would pass for "no parent").
    tpar = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    tinst = trace["true_instance"].to_numpy().astype(np.int64)
    call_row = instances["call_row"].to_numpy()
    _same_trace(trace, instances)
    inf_inst = instances["instance"].to_numpy()
    inf_parent = instances["parent"].fill_null(-1).to_numpy()
    parent_uid = np.where(inf_parent >= 0, uid[call_row][np.maximum(inf_parent, 0)], -1)
    link_ok = (parent_uid == tpar[call_row]) & (uid[instances["return_row"].to_numpy()] == uid[call_row])
    _, group = np.unique(inf_inst, return_inverse=True)
    return link_ok, group.ravel(), tinst[call_row]


def _exact_instances(
    group: np.ndarray,
    my_true_inst: np.ndarray,
    link_ok: np.ndarray,
    true_ids: np.ndarray,
    true_size: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per inferred instance (``group`` of each call): its calls, whether it is exact
    (all its calls come from one true instance, it has all of that instance's calls,
    and every parent link is the true one), and the lowest true instance of its calls."""
    n_groups = int(group.max()) + 1 if group.size else 0
    size = np.bincount(group, minlength=n_groups)
    t_min = np.full(n_groups, np.iinfo(np.int64).max)
    t_max = np.full(n_groups, np.iinfo(np.int64).min)
    np.minimum.at(t_min, group, my_true_inst)
    np.maximum.at(t_max, group, my_true_inst)
    links = np.bincount(group, weights=link_ok, minlength=n_groups)
    at = np.minimum(np.searchsorted(true_ids, t_min), max(true_ids.size - 1, 0))
    known = (true_ids.size > 0) & (true_ids[at] == t_min) if true_ids.size else np.zeros(n_groups, bool)
    full = known & (np.where(known, true_size[at], -1) == size)
    exact = (t_min == t_max) & full & (links == size)
    return size, exact, t_min


# --- convolution paths files -------------------------------------------------------------


@dataclass(frozen=True)
class LinearTruth:
    """True linear paths of a trace with truth columns: every path of causes from an
    instance's first message to a message that causes no other.

    Attributes
    ----------
    patterns : dict
        Node sequence (tuple) -> per-hop delay samples: an array of shape
        ``(paths, len(nodes) - 2)`` in seconds (delay from a message to the next). A
        request with calls made at once has one path per branch.
    broken_instances : int
        Instances left out because a message's cause is missing from the trace (lost).
    prefixes : dict
        Messages on every hop in context: node sequence from the first sender to the
        message's receiver (two nodes or more) -> true messages.
    """

    patterns: dict[tuple[str, ...], np.ndarray]
    broken_instances: int
    prefixes: dict[tuple[str, ...], int]

    def count(self, nodes: tuple[str, ...]) -> int:
        return int(self.patterns[nodes].shape[0])

    def by_count(self) -> list[tuple[str, ...]]:
        """Node sequences by path count, descending (ties by the sequence)."""
        return sorted(self.patterns, key=lambda k: (-self.count(k), k))

    def prefix_counts(self) -> dict[tuple[str, ...], int]:
        """Messages on every hop in context (``prefixes``)."""
        return self.prefixes

    def found_in(self, nodes: tuple[str, ...], paths: list[dict[str, Any]], tolerance_s: float) -> bool:
        """Whether one of ``paths`` (of a paths file) starts with the true path ``nodes``
        and reports, on every hop, a delay within ``tolerance_s`` of the hop's true median
        (the hop's median where it gives one, else any of its delays)."""
        n = len(nodes)
        return any(
            tuple(p["nodes"][:n]) == nodes and _hops_match(_reported(p), self.patterns[nodes], tolerance_s)
            for p in paths
        )


#: A message whose cause is not in the trace.
_LOST = -2


def _first_point(trace: pa.Table) -> np.ndarray:
    """The first row of each message (its ``true_call`` and ``op``): a copy of it seen at
    a second capture point is not another message. A merged capture names its points
    after interfaces or files and keeps one copy of each message; synth's points p1, p2,
    ... keep one each."""
    n = trace.num_rows
    if "point" not in trace.column_names or n == 0:
        return np.ones(n, bool)
    uid = trace["true_call"].to_numpy().astype(np.int64)
    ops = op_codes(trace)
    order = np.lexsort((np.arange(n), ops, uid))
    first = np.ones(n, bool)
    first[1:] = (uid[order][1:] != uid[order][:-1]) | (ops[order][1:] != ops[order][:-1])
    out = np.zeros(n, bool)
    out[order] = first
    return out


def true_causes(trace: pa.Table) -> np.ndarray:
    """The message that caused each message of a sorted, validated trace with truth
    columns (a row index; -1: the first message of its instance; -2: the cause is not in
    the trace).

    A one-way message's cause is its ``true_parent``. A call or return leaves a visit
    (a call leaves its parent's, a return its own) and its cause is the latest message
    into that visit at or before it: the visit's call, or the return of one of its
    calls (at equal times, the trace's order decides). Calls made at once share a cause;
    the visit's return is caused by the last answer it waited for. A second capture
    point's copies (``point`` other than p1) are left out (-2).

    Examples
    --------
    >>> import pyarrow as pa
    >>> t = validate_trace(pa.table({"timestamp": pa.array([0, 1, 2, 3], pa.timestamp("ns")),
    ...     "sender": ["c", "a", "b", "a"], "receiver": ["a", "b", "a", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64()),
    ...     "true_instance": pa.array([0] * 4, pa.uint64()), "true_call": pa.array([1, 2, 2, 1], pa.uint64()),
    ...     "true_parent": pa.array([None, 1, 1, None], pa.uint64())}))
    >>> true_causes(t).tolist()
    [-1, 0, 1, 2]
    """
    n = trace.num_rows
    ops = op_codes(trace)
    uid = trace["true_call"].to_numpy().astype(np.int64)
    tpar = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    keep = _first_point(trace)
    cause = np.full(n, _LOST, np.int64)
    _send_causes(cause, np.flatnonzero((ops == OP_SEND) & keep), uid, tpar)
    _rpc_causes(cause, np.flatnonzero((ops != OP_SEND) & keep), ops, uid, tpar)
    # A cause comes earlier in the trace; truth columns that say otherwise (a loop of
    # parents) leave the message without one.
    cause[cause >= np.arange(n)] = _LOST
    return cause


def _send_causes(cause: np.ndarray, send: np.ndarray, uid: np.ndarray, tpar: np.ndarray) -> None:
    """Set the cause of the one-way messages ``send`` (rows): the parent named."""
    by_uid = send[np.argsort(uid[send], kind="stable")]
    at = np.minimum(np.searchsorted(uid[by_uid], tpar[send]), max(by_uid.size - 1, 0))
    if by_uid.size:
        found = uid[by_uid][at] == tpar[send]
        cause[send] = np.where(found, by_uid[at], np.where(tpar[send] == -1, -1, _LOST))


def _rpc_causes(
    cause: np.ndarray, rpc: np.ndarray, ops: np.ndarray, uid: np.ndarray, tpar: np.ndarray
) -> None:
    """Set the cause of the calls and returns ``rpc`` (rows): the latest message into
    the visit they leave."""
    is_call = ops[rpc] == OP_CALL
    root_call = is_call & (tpar[rpc] == -1)
    cause[rpc[root_call]] = -1
    enters = np.where(is_call, uid[rpc], tpar[rpc])  # a root's return enters no visit
    leaves = np.where(is_call, tpar[rpc], uid[rpc])
    e_rows = rpc[enters != -1]
    l_rows = rpc[~root_call]
    visit = np.concatenate([enters[enters != -1], leaves[~root_call]])
    rows = np.concatenate([e_rows, l_rows])
    kind = np.concatenate([np.zeros(e_rows.size, np.int8), np.ones(l_rows.size, np.int8)])
    # By visit, then row: the trace is in time order, and at equal times its order decides
    # (a call of no duration is answered after it is made, not before).
    order = np.lexsort((rows, visit))
    visit, rows, kind = visit[order], rows[order], kind[order]
    pos = np.arange(order.size)
    last_in = np.maximum.accumulate(np.where(kind == 0, pos, -1)) if pos.size else pos
    leaving = np.flatnonzero(kind == 1)
    src = last_in[leaving]
    ok = (src >= 0) & (visit[np.maximum(src, 0)] == visit[leaving])
    cause[rows[leaving]] = np.where(ok, rows[np.maximum(src, 0)], _LOST)


def true_linear_paths(trace: pa.Table) -> LinearTruth:
    """Every path of causes (``true_causes``) from an instance's first message to a
    message that causes no other, as its node sequence (the first sender, then every
    receiver) and the delays between its messages.

    A request whose calls run one after another is one path; one that makes calls at
    once has a path per branch (the branch whose answer came last goes on to the
    request's return).
    """
    _truth_columns(trace)
    trace = sort_trace(validate_trace(trace))
    nodes = node_codes(trace)
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    inst = trace["true_instance"].to_numpy().astype(np.int64)
    cause = true_causes(trace)
    first_point = _first_point(trace)
    # An instance with a message whose cause is missing is left out whole.
    lost = np.unique(inst[(cause == _LOST) & first_point])
    usable = first_point & (cause != _LOST) & ~np.isin(inst, lost)
    rows = np.flatnonzero(usable)
    if rows.size == 0:
        return LinearTruth({}, int(lost.size), {})
    parent = np.where(usable, cause, -1)
    # Ancestors of every message, nearest first, as columns (depth is a few dozen at most).
    chain = [rows]
    while True:
        up = parent[chain[-1]]
        up = np.where(chain[-1] >= 0, up, -1)
        if not (up >= 0).any():
            break
        chain.append(up)
    anc = np.stack(chain[::-1], axis=1)  # root first, padded with -1 on the left
    names = nodes.names
    has_child = np.zeros(trace.num_rows, bool)
    has_child[parent[rows][parent[rows] >= 0]] = True
    prefixes: dict[tuple[str, ...], int] = {}
    patterns: dict[tuple[str, ...], list[np.ndarray]] = {}
    seqs, inverse = np.unique(
        np.where(anc >= 0, nodes.receiver[np.maximum(anc, 0)], -1), axis=0, return_inverse=True
    )
    inverse = inverse.ravel()
    first = anc[np.arange(rows.size), np.argmax(anc >= 0, axis=1)]
    first_sender = nodes.sender[first]
    key = np.column_stack([first_sender, inverse])
    keys, k_inv = np.unique(key, axis=0, return_inverse=True)
    k_inv = k_inv.ravel()
    for k, (snd, s) in enumerate(keys.tolist()):
        members = np.flatnonzero(k_inv == k)
        seq = (names[snd], *(names[r] for r in seqs[s].tolist() if r >= 0))
        prefixes[seq] = members.size
        leaves = members[~has_child[rows[members]]]
        if leaves.size:
            hops = anc[leaves][:, anc.shape[1] - (len(seq) - 1) :]
            patterns[seq] = np.diff(ts[hops], axis=1) / 1e9
    return LinearTruth(patterns, int(lost.size), prefixes)


def _reported(path: dict[str, Any]) -> list[list[float]]:
    """Per hop of a convolution path, the delays it reports for the hop: its median where
    it gives one (a one-for-one hop), else every delay found (most frequent first)."""
    medians = path.get("medians_s") or []
    return [
        [float(medians[k])] if k < len(medians) and medians[k] is not None else [float(d) for d in ds]
        for k, ds in enumerate(path["delays_s"])
    ]


def _hops_match(delays: list[list[float]], samples: np.ndarray, tol: float) -> bool:
    """Every hop has a reported delay within ``tol`` of its true median delay."""
    for k in range(samples.shape[1]):
        found = np.asarray(delays[k], np.float64) if k < len(delays) else np.zeros(0)
        if found.size == 0 or not (np.abs(found - np.median(samples[:, k])) <= tol).any():
            return False
    return True


def evaluate_convolution(
    paths: dict[str, Any],
    trace: pa.Table,
    *,
    ns: tuple[int, ...] = DEFAULT_NS,
    tolerances: tuple[float, ...] = DEFAULT_TOLERANCES,
    tolerance_s: float | None = None,
    min_true_count: int = 0,
) -> dict[str, Any]:
    """Score a convolution paths file against the truth of a synthetic trace.

    A true linear path (:func:`true_linear_paths`) is *found* when an inferred path starts
    with its node sequence and, on every hop, the delay reported is within
    ``tolerance_s`` (default: the quantum plus the delay band) of the hop's true median
    delay: the hop's median where the path gives one, else any of its delays. An
    inferred path is a false positive unless its node sequence is a true path's; one
    that is a true path's beginning is counted as ``partial`` too.

    Returns
    -------
    dict
        The accuracy report (``docs/files.md``), plus ``edges`` (hops in context, the paper's
        graph comparison: a hop is right when its path so far begins a true path),
        message counts compared hop by hop (estimated against true) and ``hops``: the
        true paths' hops (a delay at a node, in context) found and near the truth's
        median (within the tolerance). ``instances`` has no inferred side (convolution
        finds no instances).

    Examples
    --------
    >>> import synth, infer
    >>> cfg = synth.parse_config('''nodes = ["a", "b", "c"]
    ... [trace]
    ... messages = 3000
    ... parallelism = 4
    ... [[tracelet]]
    ... kind = "messages"
    ... client = "a"
    ... think_s = [0.5, 1.5]
    ... [[tracelet.hop]]
    ... to = "b"
    ... [[tracelet.hop]]
    ... to = "c"
    ... delay_s = [0.05, 0.002]''')
    >>> table, _ = synth.generate_table(cfg)
    >>> r = infer.infer_convolution(table, quantum_s=0.01, max_lag_s=0.5)
    >>> report = evaluate_convolution(r.to_json(), table)
    >>> report["patterns"]["false_negatives"], report["patterns"]["false_positives"]
    (0, 0)
    """
    params = paths.get("params", {})
    quantum = float(params.get("quantum_s", 0.0))
    tol = float(tolerance_s) if tolerance_s is not None else quantum + float(params.get("band_s", 0.0))
    truth = true_linear_paths(trace)
    inferred = [p for p in paths.get("paths", []) if len(p.get("nodes", [])) >= 2]
    inferred = sorted(inferred, key=lambda p: (-float(p.get("count", 0)), p["nodes"]))
    true_seqs = {s for s in truth.patterns if truth.count(s) >= min_true_count}
    found = {seq for seq in true_seqs if truth.found_in(seq, inferred, tol)}
    ranked = [s for s in truth.by_count() if s in true_seqs]
    return {
        "patterns": _path_scores(truth, true_seqs, found, inferred),
        "top_n": _top_n_scores(ranked, inferred, truth, tol, ns, tolerances),
        **_hop_in_context_scores(truth, inferred),
        "hops": _hop_scores(truth, true_seqs, inferred, tol),
        "instances": {
            "true": sum(truth.count(s) for s in true_seqs),
            "inferred": None,
            "false_negatives": None,
            "false_positives": None,
        },
        "delay_error": _delay_error(truth, found, inferred, tol),
    }


def _path_scores(
    truth: LinearTruth, true_seqs: set[tuple[str, ...]], found: set[tuple[str, ...]], inferred: list[dict]
) -> dict[str, Any]:
    """True paths missed, inferred paths that are no true path (and those that begin one)."""
    exact = [p for p in inferred if tuple(p["nodes"]) in truth.patterns]
    prefixes = truth.prefix_counts()
    partial = [
        p for p in inferred if tuple(p["nodes"]) not in truth.patterns and tuple(p["nodes"]) in prefixes
    ]
    fp = len(inferred) - len(exact)
    return {
        "true": len(true_seqs),
        "inferred": len(inferred),
        "false_negatives": len(true_seqs) - len(found),
        "false_positives": fp,
        "false_positive_rate": fp / len(inferred) if inferred else 0.0,
        "partial": len(partial),
        "broken_instances": truth.broken_instances,
    }


def _top_n_scores(
    ranked: list[tuple[str, ...]],
    inferred: list[dict],
    truth: LinearTruth,
    tol: float,
    ns: tuple[int, ...],
    tolerances: tuple[float, ...],
) -> list[dict[str, Any]]:
    """The N most frequent true paths missing from the inferred ones within count
    tolerance ``t`` of the N-th (the paper's Figure 17 measure); found as
    :meth:`LinearTruth.found_in` says, within ``tol``."""
    top = []
    for n in ns:
        if n > len(ranked):
            continue
        for t in tolerances:
            chosen = inferred
            if len(inferred) >= n:
                cut = float(inferred[n - 1]["count"]) * (1.0 - t)
                chosen = [p for p in inferred if float(p["count"]) >= cut]
            missing = sum(not truth.found_in(seq, chosen, tol) for seq in ranked[:n])
            top.append({"n": n, "missing": missing, "missing_rate": missing / n, "tolerance": t})
    return top


def _hop_in_context_scores(truth: LinearTruth, inferred: list[dict]) -> dict[str, Any]:
    """``edges``: hops in context (every prefix of an inferred path) against the true
    ones; ``messages``: their estimated messages against the true counts."""
    est: dict[tuple[str, ...], float] = {}
    for p in inferred:
        for k, c in enumerate(p["counts"]):
            est[tuple(p["nodes"][: k + 2])] = float(c)
    true_prefixes = truth.prefix_counts()
    wrong = [k for k in est if k not in true_prefixes]
    return {
        "edges": {
            "true": len(true_prefixes),
            "inferred": len(est),
            "false_negatives": sum(k not in est for k in true_prefixes),
            "false_positives": len(wrong),
            "false_positive_rate": len(wrong) / len(est) if est else 0.0,
        },
        "messages": {
            "true": sum(true_prefixes.values()),
            "false_negatives": round(sum(max(c - est.get(k, 0.0), 0.0) for k, c in true_prefixes.items())),
            "false_positives": round(sum(max(c - true_prefixes.get(k, 0), 0.0) for k, c in est.items())),
        },
    }


def _hop_scores(
    truth: LinearTruth, true_seqs: set[tuple[str, ...]], inferred: list[dict], tol: float
) -> dict[str, Any]:
    """Every hop (a delay at a node, in the context of its path so far) of the true
    paths scored: found (an inferred path goes through it in that context) and near
    (its median there, or where it gives none one of its delays, within ``tol`` of the
    truth's median)."""
    delays: dict[tuple[str, ...], list[float]] = {}
    for p in inferred:
        for k, ds in enumerate(_reported(p)):
            delays.setdefault(tuple(p["nodes"][: k + 3]), []).extend(ds)
    # A hop in context can lie on several true paths (a branch and its longer twin): its
    # median is over the delays of all of them.
    samples: dict[tuple[str, ...], list[np.ndarray]] = {}
    for seq in sorted(true_seqs):
        for k in range(truth.patterns[seq].shape[1]):
            samples.setdefault(seq[: k + 3], []).append(truth.patterns[seq][:, k])
    hops = {h: float(np.median(np.concatenate(s))) for h, s in samples.items()}
    found = [h for h in hops if h in delays]
    near = [h for h in found if any(abs(d - hops[h]) <= tol for d in delays[h])]
    return {"true": len(hops), "found": len(found), "near": len(near), "tolerance_s": tol}


def _delay_error(
    truth: LinearTruth, found: set[tuple[str, ...]], inferred: list[dict], tol: float
) -> dict[str, float | None]:
    """Relative error of each found path's delay per hop (its median where it gives one,
    else its most frequent) against the mean of the true delays within ``tol`` of it:
    median and 90th percentile."""
    errors = []
    for seq in found:
        samples = truth.patterns[seq]
        p = next(p for p in inferred if tuple(p["nodes"][: len(seq)]) == seq)
        typical = hop_delays_s(p)
        for k in range(samples.shape[1]):
            d0 = typical[k]
            near = samples[:, k][np.abs(samples[:, k] - d0) <= tol]
            if near.size and near.mean() > 0:
                errors.append(abs(d0 - near.mean()) / near.mean())
    if not errors:
        return {"median_rel": None, "p90_rel": None}
    return {"median_rel": float(np.median(errors)), "p90_rel": float(np.percentile(errors, 90))}
