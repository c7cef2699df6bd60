"""Short text summaries of inference runs and accuracy reports, a list of lines each.

``nesting_lines`` and ``convolution_lines`` say what a run found (from its paths file),
``pattern_line`` heads one nesting pattern, and ``evaluation_lines`` gives the scores of
an ``evaluate_paths`` report (with ``infer.calibration.reliability_lines`` for its
confidence). They are what ``wirepath infer`` and ``wirepath eval`` print; the drawings
of patterns and paths (``viz.paths.tree_lines``, ``viz.paths.format_path``) go with them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from infer.calibration import rough_note
from infer.callers import CallerAttribution
from tracefmt.units import format_duration_ns

if TYPE_CHECKING:
    from infer.nesting import NestingResult

__all__ = ["convolution_lines", "evaluation_lines", "nesting_lines", "pattern_line"]


def _wrote(outputs: Sequence[str | os.PathLike[str]]) -> str:
    """``"; wrote a and b"`` for the files written, else nothing."""
    return f"; wrote {' and '.join(str(o) for o in outputs)}" if outputs else ""


def nesting_lines(
    result: NestingResult, doc: dict[str, Any], *, wrote: Sequence[str | os.PathLike[str]] = ()
) -> list[str]:
    """The summary of a nesting run: call pairs, the instances left out for low
    confidence, a clock-skew tolerance estimated, instances and patterns, a note where
    the confidence's calibration is rough (``infer.calibration.rough_note``), and each
    time window's.

    ``result`` is the whole result and ``doc`` the paths file written of it (or of
    ``result.confident(...)[0]``); ``wrote`` names the files written.

    Examples
    --------
    >>> import pyarrow as pa, infer
    >>> t = pa.table({"timestamp": pa.array([0, 10, 20, 30], pa.timestamp("us")),
    ...     "sender": ["c", "w", "d", "w"], "receiver": ["w", "d", "w", "c"],
    ...     "op": ["call", "call", "return", "return"], "id": pa.array([1, 2, 2, 1], pa.uint64())})
    >>> r = infer.infer_nesting(t, "paper")
    >>> print("\\n".join(nesting_lines(r, r.to_json(), wrote=["p.json"])))
    2 call pairs (0 calls and 0 returns unmatched, 0 sends ignored); mean parallelism 1.0
    1 path instances in 1 patterns; wrote p.json
    """
    st = doc["stats"]
    lines = [
        f"{len(result.pairs):,} call pairs ({st['unmatched_calls']:,} calls and {st['unmatched_returns']:,} "
        f"returns unmatched, {st['sends_ignored']:,} sends ignored); mean parallelism "
        f"{result.mean_parallelism:.1f}{_without_keys(st)}",
        f"{st['instances']:,} path instances in {st['patterns']:,} patterns{_wrote(wrote)}",
    ]
    left = st.get("min_confidence")
    if left:
        lines.insert(
            1,
            f"left out {left['instances_left_out']:,} instances ({left['call_pairs_left_out']:,} call "
            f"pairs) holding {left['links_below']:,} links of confidence below {left['min']:g}",
        )
    if st.get("tolerance_s", 0) > result.params.tolerance_s:
        lines.insert(
            1,
            f"clock skew: calls outside every call into their node; tolerance "
            f"{st['tolerance_s'] * 1e3:.3g} ms estimated (--no-auto-tolerance to keep "
            f"{result.params.tolerance_s * 1e3:g} ms)",
        )
    if st.get("callers"):
        lines += [f"note: {line}" for line in CallerAttribution(**st["callers"]).lines()]
    if st.get("keys"):
        lines[1:1] = key_lines(st["keys"])
    rough = rough_note(doc)
    if rough:
        lines.append(f"note: {rough}")
    for w in doc.get("windows", []):
        head = w["patterns"][0] if w["patterns"] else None
        top_text = f"; top {head['id']} x{head['count']:,}" if head else ""
        lines.append(
            f"window {w['start']}: {w['instances']:,} instances, {len(w['patterns'])} patterns{top_text}"
        )
    return lines


def _without_keys(stats: dict[str, Any]) -> str:
    """How busy the traffic is where the keys narrowed the candidates (" (31.2 without
    the request keys)"), else nothing."""
    before = (stats.get("keys") or {}).get("mean_parallelism_without_keys")
    return "" if before is None else f" ({before:.1f} without the request keys)"


def key_lines(keys: dict[str, Any]) -> list[str]:
    """What the request keys decided, from a paths file's ``stats.keys``.

    Examples
    --------
    >>> print("\\n".join(key_lines({"pairs": 1000, "keyed": 200, "keyed_by_request_id": 200,
    ...     "keyed_after_spreading": 260, "requests": 90, "narrowed": 150, "pinned": 80,
    ...     "moved_to_agree": 3, "held_out_calls": 120, "held_out_right": 90})))
    request keys: 200 of 1,000 call pairs keyed (request_id 200), 260 after spreading; 150 narrowed, 80 pinned
    held out: 75.0% of 120 keyed calls found again with their keys hidden (wirepath eval --truth keys)
    """
    kinds = ", ".join(f"{k[9:]} {v:,}" for k, v in keys.items() if k.startswith("keyed_by_"))
    lines = [
        f"request keys: {keys['keyed']:,} of {keys['pairs']:,} call pairs keyed ({kinds}), "
        f"{keys['keyed_after_spreading']:,} after spreading; {keys['narrowed']:,} narrowed, "
        f"{keys['pinned']:,} pinned"
    ]
    if keys.get("held_out_calls"):
        share = keys["held_out_right"] / keys["held_out_calls"]
        lines.append(
            f"held out: {share:.1%} of {keys['held_out_calls']:,} keyed calls found again with their "
            "keys hidden (wirepath eval --truth keys)"
        )
    return lines


def pattern_line(rank: int, pattern: dict[str, Any]) -> str:
    """The heading of a nesting pattern of a paths file: rank, id, instances, the chance
    that an instance is exactly right (when known: the model's estimate from the trace,
    not a measurement, so said as one) and the total latency.

    Examples
    --------
    >>> pattern_line(1, {"id": "a1b2", "count": 1200, "confidence": 0.92, "total_latency_s": 3.5})
    '#1 a1b2  1,200 instances (est. 92.0% exactly right), total 3.500 s'
    """
    conf = pattern.get("confidence")
    sure = "" if conf is None else f" (est. {conf:.1%} exactly right)"
    total = pattern["total_latency_s"]
    return f"#{rank} {pattern['id']}  {pattern['count']:,} instances{sure}, total {total:.3f} s"


def convolution_lines(doc: dict[str, Any], *, wrote: Sequence[str | os.PathLike[str]] = ()) -> list[str]:
    """The summary of a convolution run from its paths file: messages, edges, quanta and
    lags, edge pairs correlated and spikes; roots, paths and vertices; the run's notes.

    Examples
    --------
    >>> doc = {"params": {"quantum_s": 0.001, "max_lag_s": 1.0}, "roots": ["client"],
    ...     "paths": [{}], "notes": [], "stats": {"messages": 804, "edges": 14, "quanta": 5975,
    ...     "pairs_correlated": 36, "spikes": 21, "vertices": 9}}
    >>> print("\\n".join(convolution_lines(doc)))
    804 messages on 14 edges; 5,975 quanta of 1 ms, lags up to 1 s; 36 edge pairs correlated, 21 spikes
    roots: client; 1 paths (9 vertices)
    """
    st, params = doc["stats"], doc["params"]
    lines = [
        f"{st['messages']:,} messages on {st['edges']} edges; {st['quanta']:,} quanta of "
        f"{format_duration_ns(round(params['quantum_s'] * 1e9))}, lags up to "
        f"{format_duration_ns(round(params['max_lag_s'] * 1e9))}; {st['pairs_correlated']} edge pairs "
        f"correlated, {st['spikes']} spikes",
        f"roots: {', '.join(doc['roots']) or '(none)'}; {len(doc['paths'])} paths "
        f"({st['vertices']} vertices){_wrote(wrote)}",
    ]
    return lines + [f"note: {n}" for n in doc["notes"]]


def evaluation_lines(report: dict[str, Any]) -> list[str]:
    """The summary of an ``evaluate_paths`` report: false negatives and positives, the
    top-N missing rates and the latency error; with instances scored, requests fully
    right, calls with the right parent and the confidence's reliability; for
    convolution paths, edges, estimated messages and hops.

    Examples
    --------
    >>> report = {"patterns": {"true": 3, "inferred": 4, "false_negatives": 0, "false_positives": 1},
    ...     "instances": {"inferred": None}, "top_n": [{"n": 1, "missing_rate": 0.0, "tolerance": 0.0}],
    ...     "delay_error": {"median_rel": 0.012, "p90_rel": 0.05}}
    >>> print("\\n".join(evaluation_lines(report)))
    patterns   true 3, inferred 4: 0 false negatives, 1 false positives
    instances  (give --instances I.parquet from 'infer --instances' to score them)
    top 1      missing 0% at 0%
    latency    relative error median 1.20%, p90 5.00%
    """
    p, i = report["patterns"], report["instances"]
    lines = [
        f"patterns   true {p['true']:,}, inferred {p['inferred']:,}: "
        f"{p['false_negatives']:,} false negatives, {p['false_positives']:,} false positives",
    ]
    if i["inferred"] is not None:
        lines += _instance_lines(report)
    elif "edges" in report:  # a convolution paths file: hops in context, estimated messages
        lines += _hop_lines(report)
    else:
        lines.append("instances  (give --instances I.parquet from 'infer --instances' to score them)")
    for row in report["top_n"]:
        if row["tolerance"] == 0.0:
            tol = [r for r in report["top_n"] if r["n"] == row["n"]]
            rates = ", ".join(f"{r['missing_rate']:.0%} at {r['tolerance']:.0%}" for r in tol)
            lines.append(f"top {row['n']:<3}    missing {rates}")
    d = report["delay_error"]
    if d["median_rel"] is not None:
        lines.append(f"latency    relative error median {d['median_rel']:.2%}, p90 {d['p90_rel']:.2%}")
    return lines


def _instance_lines(report: dict[str, Any]) -> list[str]:
    """Instances, messages, requests fully right and calls with the right parent (nesting)."""
    i, m, c = report["instances"], report["messages"], report["calls"]
    lines = [
        f"instances  true {i['true']:,}, inferred {i['inferred']:,}: "
        f"{i['false_negatives']:,} false negatives, {i['false_positives']:,} false positives",
        f"messages   true {m['true']:,}: {m['false_negatives']:,} false negatives, "
        f"{m['false_positives']:,} false positives",
    ]
    if i["true"] and c["true"]:
        lines.append(
            f"requests   fully right {i['fully_right']:,} of {i['true']:,} "
            f"({i['fully_right_rate']:.1%}): every call got its true parent"
        )
        rate = c["right_parent_rate"]
        lines.append(f"calls      right parent {c['right_parent']:,} of {c['true']:,} ({rate:.1%})")
    if report.get("confidence"):
        # Here only: the calibration module loads SciPy, which a convolution summary never needs.
        from infer.calibration import reliability_lines

        lines.extend(reliability_lines(report["confidence"]))
    return lines


def _hop_lines(report: dict[str, Any]) -> list[str]:
    """Edges, estimated messages and hops found with their delays (convolution)."""
    e, m, h = report["edges"], report["messages"], report["hops"]
    within = format_duration_ns(round(h["tolerance_s"] * 1e9))
    return [
        f"edges      true {e['true']:,}, inferred {e['inferred']:,}: "
        f"{e['false_negatives']:,} false negatives, {e['false_positives']:,} false positives",
        f"messages   true {m['true']:,}: {m['false_negatives']:,} false negatives, "
        f"{m['false_positives']:,} false positives (estimated counts)",
        f"hops       true {h['true']:,}: found {h['found']:,}, a delay within {within} "
        f"of the true median at {h['near']:,}",
    ]
