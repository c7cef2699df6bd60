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
    op_codes,
    sort_trace,
    validate_trace,
)

__all__ = [
    "DEFAULT_NS",
    "DEFAULT_TOLERANCES",
    "LinearTruth",
    "evaluate_convolution",
    "evaluate_paths",
    "true_linear_paths",
    "true_pairs",
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
    if "point" in trace.column_names:
        # A second capture point's copy is not another call.
        first = trace["point"].cast(pa.string()).to_numpy(zero_copy_only=False) == "p1"
    else:
        first = np.ones(ts.size, bool)
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


def true_patterns(trace: pa.Table) -> list[Pattern]:
    """True patterns of a synthetic trace, sorted by count."""
    pairs, parent, names, _ = true_pairs(trace)
    return build_patterns(pairs, parent, names, sort="count")[0]


def _visit_values(root: dict[str, Any], key: str) -> list[float]:
    out: list[float] = []

    def walk(v: dict[str, Any]) -> None:
        if v.get(key) is not None:
            out.append(float(v[key]["mean"]))
        for c in v.get("children", []):
            walk(c)

    walk(root)
    return out


def evaluate_paths(
    paths: dict[str, Any],
    trace: pa.Table,
    *,
    instances: pa.Table | None = None,
    ns: tuple[int, ...] = DEFAULT_NS,
    tolerances: tuple[float, ...] = DEFAULT_TOLERANCES,
) -> dict[str, Any]:
    """Score a paths file against a trace with ground truth (the ``results.md`` report).

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
        The ``results.md`` accuracy report. ``instances`` also holds ``fully_right``,
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
        }
    }
    true_by_count = [p.id for p in truth]
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
    report["top_n"] = top
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
    report["delay_error"] = (
        {"median_rel": float(np.median(errors)), "p90_rel": float(np.percentile(errors, 90))}
        if errors
        else {"median_rel": None, "p90_rel": None}
    )
    report["instances"], report["messages"], report["calls"], verdicts = _instance_scores(
        trace, pairs.call_row, inst, instances
    )
    if verdicts is not None and "confidence" in instances.column_names:
        report["confidence"] = _confidence_scores(instances, *verdicts)
    return report


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
        return (
            {
                "true": true_instances,
                "inferred": None,
                "false_negatives": None,
                "false_positives": None,
                "fully_right": None,
                "fully_right_rate": None,
            },
            {"true": true_messages, "false_negatives": None, "false_positives": None},
            {"true": n_pairs, "right_parent": None, "right_parent_rate": None},
            None,
        )
    uid = trace["true_call"].to_numpy().astype(np.int64)
    # Uids are far below 2**63: the null fill reads back as a negative int64.
    tpar = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    tinst = trace["true_instance"].to_numpy().astype(np.int64)
    call_row = instances["call_row"].to_numpy()
    _same_trace(trace, instances)
    inf_inst = instances["instance"].to_numpy()
    inf_parent = instances["parent"].fill_null(-1).to_numpy()
    my_true_inst = tinst[call_row]
    parent_uid = np.where(inf_parent >= 0, uid[call_row][np.maximum(inf_parent, 0)], -1)
    # Right parent, and the call closed by its own return.
    link_ok = (parent_uid == tpar[call_row]) & (uid[instances["return_row"].to_numpy()] == uid[call_row])
    # An inferred instance is exact when all its calls come from one true instance, it
    # has all of that instance's calls, and every parent link is the true one.
    _, group = np.unique(inf_inst, return_inverse=True)
    group = group.ravel()
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
    recovered = int(np.unique(t_min[exact]).size)
    # Per true call: inferred, and right. A true instance is fully right when all are.
    right = np.isin(true_rows, call_row[link_ok])
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
    good_msgs = int(2 * size[exact].sum())
    msg_report = {
        "true": true_messages,
        "false_negatives": true_messages - good_msgs,
        "false_positives": int(2 * size[~exact].sum()),
    }
    n_right = int(right.sum())
    call_report = {
        "true": n_pairs,
        "right_parent": n_right,
        "right_parent_rate": n_right / n_pairs if n_pairs else None,
    }
    return inst_report, msg_report, call_report, (link_ok, group, exact)


# --- convolution paths files -------------------------------------------------------------


@dataclass(frozen=True)
class LinearTruth:
    """True linear paths of a synthetic trace: every instance's messages in causal order.

    Attributes
    ----------
    patterns : dict
        Node sequence (tuple) -> per-hop delay samples: an array of shape
        ``(instances, len(nodes) - 2)`` in seconds (delay from a message to the next).
    nonlinear_instances : int
        Instances whose messages do not form one chain (parallel calls, fan-out), left out.
    """

    patterns: dict[tuple[str, ...], np.ndarray]
    nonlinear_instances: int

    def count(self, nodes: tuple[str, ...]) -> int:
        return int(self.patterns[nodes].shape[0])

    def by_count(self) -> list[tuple[str, ...]]:
        """Node sequences by instance count, descending (ties by the sequence)."""
        return sorted(self.patterns, key=lambda k: (-self.count(k), k))

    def prefix_counts(self) -> dict[tuple[str, ...], int]:
        """Messages on every hop in context: prefix (two nodes or more) -> true messages."""
        out: dict[tuple[str, ...], int] = {}
        for nodes, delays in self.patterns.items():
            for k in range(2, len(nodes) + 1):
                out[nodes[:k]] = out.get(nodes[:k], 0) + int(delays.shape[0])
        return out


def true_linear_paths(trace: pa.Table) -> LinearTruth:
    """Each true instance as a linear path: its messages in order, sender of the first then
    every receiver, when each message leaves the node the previous one reached.

    Order is time, then (for one-way messages stamped in the same clock tick) the position
    in the ``true_parent`` chain, then the row.
    """
    _truth_columns(trace)
    trace = sort_trace(validate_trace(trace))
    nodes = node_codes(trace)
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    inst = trace["true_instance"].to_numpy().astype(np.int64)
    uid = trace["true_call"].to_numpy().astype(np.int64)
    tpar = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    keep = np.ones(ts.size, bool)
    if "point" in trace.column_names:
        keep = trace["point"].cast(pa.string()).to_numpy(zero_copy_only=False) == "p1"
    # Depth along the true_parent chain of one-way messages (their true_call is unique).
    send = (op_codes(trace) == OP_SEND) & keep
    rows = np.flatnonzero(send)
    by_uid = rows[np.argsort(uid[rows], kind="stable")]
    at = np.minimum(np.searchsorted(uid[by_uid], tpar[rows]), max(by_uid.size - 1, 0))
    parent_row = np.full(ts.size, -1, np.int64)
    if by_uid.size:
        parent_row[rows] = np.where(uid[by_uid][at] == tpar[rows], by_uid[at], -1)
    depth = np.zeros(ts.size, np.int64)
    anc = parent_row.copy()
    while (anc >= 0).any():
        depth += anc >= 0
        anc = np.where(anc >= 0, parent_row[np.maximum(anc, 0)], -1)
    rows = np.flatnonzero(keep)
    rows = rows[np.lexsort((rows, depth[rows], ts[rows], inst[rows]))]
    if rows.size == 0:
        return LinearTruth({}, 0)
    snd, rcv, t, g = nodes.sender[rows], nodes.receiver[rows], ts[rows], inst[rows]
    starts = np.flatnonzero(np.concatenate([[True], g[1:] != g[:-1]]))
    ends = np.append(starts[1:], rows.size)
    same = np.concatenate([g[1:] == g[:-1], [False]])
    broken = same & (np.append(snd[1:], -1) != rcv)  # next message leaves elsewhere
    bad = np.add.reduceat(broken.astype(np.int64), starts) > 0
    names = nodes.names
    groups: dict[tuple[str, ...], list[np.ndarray]] = {}
    for lo, hi, b in zip(starts.tolist(), ends.tolist(), bad.tolist(), strict=True):
        if b:
            continue
        seq = (names[snd[lo]], *(names[r] for r in rcv[lo:hi]))
        groups.setdefault(seq, []).append(np.diff(t[lo:hi]) / 1e9)
    patterns = {k: np.vstack(v) if v[0].size else np.zeros((len(v), 0)) for k, v in groups.items()}
    return LinearTruth(patterns, int(bad.sum()))


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
    with its node sequence and, on every hop, one of the delays reported is within
    ``tolerance_s`` (default: the quantum plus the delay band) of the hop's true median
    delay. An inferred path is a false positive unless its node sequence is a true
    path's; one that is a true path's beginning is counted as ``partial`` too.

    Returns
    -------
    dict
        The ``results.md`` accuracy report, plus ``edges`` (hops in context, the paper's
        graph comparison: a hop is right when its path so far begins a true path) and
        message counts compared hop by hop (estimated against true). ``instances`` has
        no inferred side (convolution finds no instances).

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
    inferred = sorted(inferred, key=lambda p: (-float(p["count"]), p["nodes"]))
    all_seqs = set(truth.patterns)
    true_seqs = {s for s in all_seqs if truth.count(s) >= min_true_count}
    true_prefixes = truth.prefix_counts()

    def found_in(seq: tuple[str, ...], candidates: list[dict[str, Any]]) -> bool:
        n = len(seq)
        return any(
            tuple(p["nodes"][:n]) == seq and _hops_match(p["delays_s"], truth.patterns[seq], tol)
            for p in candidates
        )

    found = {seq for seq in true_seqs if found_in(seq, inferred)}
    exact = [p for p in inferred if tuple(p["nodes"]) in all_seqs]
    partial = [
        p for p in inferred if tuple(p["nodes"]) not in all_seqs and tuple(p["nodes"]) in true_prefixes
    ]
    fp = len(inferred) - len(exact)
    report: dict[str, Any] = {
        "patterns": {
            "true": len(true_seqs),
            "inferred": len(inferred),
            "false_negatives": len(true_seqs) - len(found),
            "false_positives": fp,
            "false_positive_rate": fp / len(inferred) if inferred else 0.0,
            "partial": len(partial),
            "nonlinear_instances": truth.nonlinear_instances,
        }
    }
    ranked = [s for s in truth.by_count() if s in true_seqs]
    top = []
    for n in ns:
        if n > len(ranked):
            continue
        wanted = ranked[:n]
        for t in tolerances:
            chosen = inferred
            if len(inferred) >= n:
                cut = float(inferred[n - 1]["count"]) * (1.0 - t)
                chosen = [p for p in inferred if float(p["count"]) >= cut]
            missing = sum(not found_in(seq, chosen) for seq in wanted)
            top.append({"n": n, "missing": missing, "missing_rate": missing / n, "tolerance": t})
    report["top_n"] = top
    # Hops in context: every prefix of an inferred path, with its estimated messages.
    est: dict[tuple[str, ...], float] = {}
    for p in inferred:
        for k, c in enumerate(p["counts"]):
            est[tuple(p["nodes"][: k + 2])] = float(c)
    wrong = [k for k in est if k not in true_prefixes]
    report["edges"] = {
        "true": len(true_prefixes),
        "inferred": len(est),
        "false_negatives": sum(k not in est for k in true_prefixes),
        "false_positives": len(wrong),
        "false_positive_rate": len(wrong) / len(est) if est else 0.0,
    }
    true_msgs = sum(true_prefixes.values())
    report["messages"] = {
        "true": true_msgs,
        "false_negatives": round(sum(max(c - est.get(k, 0.0), 0.0) for k, c in true_prefixes.items())),
        "false_positives": round(sum(max(c - true_prefixes.get(k, 0), 0.0) for k, c in est.items())),
    }
    report["instances"] = {
        "true": sum(truth.count(s) for s in true_seqs),
        "inferred": None,
        "false_negatives": None,
        "false_positives": None,
    }
    errors = []
    for seq in found:
        samples = truth.patterns[seq]
        p = next(p for p in inferred if tuple(p["nodes"][: len(seq)]) == seq)
        for k in range(samples.shape[1]):
            d0 = float(p["delays_s"][k][0])
            near = samples[:, k][np.abs(samples[:, k] - d0) <= tol]
            if near.size and near.mean() > 0:
                errors.append(abs(d0 - near.mean()) / near.mean())
    report["delay_error"] = (
        {"median_rel": float(np.median(errors)), "p90_rel": float(np.percentile(errors, 90))}
        if errors
        else {"median_rel": None, "p90_rel": None}
    )
    return report
