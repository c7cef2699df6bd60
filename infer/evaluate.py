"""Accuracy of inferred paths against the ground truth of a synthetic trace.

The true paths are rebuilt from the trace's truth columns (``true_call``,
``true_parent``) with the same aggregation code inference uses, so true and inferred
patterns share ids, and latencies are compared on the timestamps as written.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from infer.callpairs import CallPairs, node_codes
from infer.patterns import Pattern, build_patterns
from tracefmt import OP_CALL, OP_RETURN, SchemaError, op_codes, sort_trace, validate_trace

__all__ = ["DEFAULT_NS", "DEFAULT_TOLERANCES", "evaluate_paths", "true_pairs", "true_patterns"]

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
        ``NestingResult.instances_table()``; needed for the instance and message scores
        (they are None without it).
    ns, tolerances :
        Top-N sizes and count tolerances of the top-N missing rate.
    """
    if paths.get("format") != "wirepath.paths/1":
        raise SchemaError(f"not a paths file (format {paths.get('format')!r}, expected 'wirepath.paths/1')")
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
    report["instances"], report["messages"] = _instance_scores(trace, len(pairs), inst, instances)
    return report


def _instance_scores(
    trace: pa.Table, n_pairs: int, inst: np.ndarray, instances: pa.Table | None
) -> tuple[Any, Any]:
    """Instance and message scores; ``trace`` sorted, ``inst`` the true instance of each true pair."""
    true_instances = int(np.unique(inst).size)
    true_messages = 2 * n_pairs
    if instances is None:
        return (
            {"true": true_instances, "inferred": None, "false_negatives": None, "false_positives": None},
            {"true": true_messages, "false_negatives": None, "false_positives": None},
        )
    uid = trace["true_call"].to_numpy().astype(np.int64)
    # Uids are far below 2**63: the null fill reads back as a negative int64.
    tpar = trace["true_parent"].fill_null(np.uint64(2**64 - 1)).to_numpy().astype(np.int64)
    tinst = trace["true_instance"].to_numpy().astype(np.int64)
    call_row = instances["call_row"].to_numpy()
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
    true_ids, true_size = np.unique(inst, return_counts=True)
    at = np.minimum(np.searchsorted(true_ids, t_min), max(true_ids.size - 1, 0))
    known = (true_ids.size > 0) & (true_ids[at] == t_min) if true_ids.size else np.zeros(n_groups, bool)
    full = known & (np.where(known, true_size[at], -1) == size)
    exact = (t_min == t_max) & full & (links == size)
    recovered = int(np.unique(t_min[exact]).size)
    inst_report = {
        "true": true_instances,
        "inferred": n_groups,
        "false_negatives": true_instances - recovered,
        "false_positives": int(n_groups - exact.sum()),
    }
    good_msgs = int(2 * size[exact].sum())
    msg_report = {
        "true": true_messages,
        "false_negatives": true_messages - good_msgs,
        "false_positives": int(2 * size[~exact].sum()),
    }
    return inst_report, msg_report
