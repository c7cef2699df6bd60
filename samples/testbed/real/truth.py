"""Per-request truth for a capture of the real testbed, from the app servers' own spans.

The apps record an OpenTelemetry server span for each request they serve and a client
span for each Redis, PostgreSQL and gRPC call it makes (``app.py``). ``wirepath convert``
turns spans into a message trace, but only RPCs *between traced services* become
messages there: a client span with no server span under it (a call into an untraced
database, cache or service) is not an RPC, and nginx is not traced either. So the span
import alone gives every request as one ``client -> app`` call and nothing below it.

What this module does instead: it stamps the capture's own messages with truth columns
(``true_call``, ``true_parent``, ``true_instance``) by joining them to the spans. The
namespaces share one kernel clock, so span times and the switch's capture times are on
the same clock:

- ``client -> nginx`` calls carry the request number in their label (``GET /item/17``);
  the app's server span has it in ``http.target``: an exact join.
- ``nginx -> appN`` calls (TLS, no label) are joined to appN's server spans: the span
  lies inside the call on the wire; among the spans that do, the one with the least
  slack is taken (an assignment over all of them, so no span serves two calls).
- ``appN -> redis|pg|grpc`` calls are joined the same way to appN's client spans for
  that backend: the call on the wire lies inside the span.

Each join is counted (joined, and joined where more than one span fitted), so the
truth's own uncertainty is on the table next to the score.
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from scipy.optimize import linear_sum_assignment

import tracefmt

BACKENDS = ("redis", "pg", "grpc")


def read_spans(path: Path) -> list[dict[str, Any]]:
    """The spans of an OTLP/JSON Lines file, flat: service, ids, kind, times, attributes."""
    out = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        for line in f:
            if not line.strip():
                continue
            for rs in json.loads(line)["resourceSpans"]:
                attrs = {a["key"]: a["value"].get("stringValue") for a in rs["resource"]["attributes"]}
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        out.append(
                            {
                                "service": attrs["service.name"],
                                "span": s["spanId"],
                                "parent": s.get("parentSpanId") or None,
                                "name": s["name"],
                                "kind": int(s["kind"]),
                                "start": int(s["startTimeUnixNano"]),
                                "end": int(s["endTimeUnixNano"]),
                                "attrs": {a["key"]: a["value"].get("stringValue") for a in s["attributes"]},
                            }
                        )
    return out


def _assign(calls: list[tuple[int, int, int]], spans: list[dict[str, Any]], inside: bool) -> dict[int, int]:
    """Join calls ``(row, t_call, t_return)`` to spans: ``inside`` means the call lies in
    the span (client spans), else the span in the call (server spans). Returns call row ->
    span index; only joins where the containment holds."""
    if not calls or not spans:
        return {}
    c0 = np.array([c[1] for c in calls], np.int64)[:, None]
    c1 = np.array([c[2] for c in calls], np.int64)[:, None]
    s0 = np.array([s["start"] for s in spans], np.int64)[None, :]
    s1 = np.array([s["end"] for s in spans], np.int64)[None, :]
    if inside:
        a, b = c0 - s0, s1 - c1
    else:
        a, b = s0 - c0, c1 - s1
    ok = (a >= 0) & (b >= 0)
    cost = np.where(ok, (a + b) / 1e6, 1e9)
    rows, cols = linear_sum_assignment(cost)
    return {calls[r][0]: int(c) for r, c in zip(rows, cols, strict=True) if ok[r, c]}


def _fits(calls: list[tuple[int, int, int]], spans: list[dict[str, Any]], inside: bool) -> int:
    """Calls that more than one span would fit."""
    if not calls or not spans:
        return 0
    c0 = np.array([c[1] for c in calls], np.int64)[:, None]
    c1 = np.array([c[2] for c in calls], np.int64)[:, None]
    s0 = np.array([s["start"] for s in spans], np.int64)[None, :]
    s1 = np.array([s["end"] for s in spans], np.int64)[None, :]
    ok = (c0 >= s0) & (c1 <= s1) if inside else (s0 >= c0) & (s1 <= c1)
    return int((ok.sum(axis=1) > 1).sum())


def _request_no(target: str | None) -> int | None:
    if not target:
        return None
    tail = target.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def add_truth(trace_path: Path, spans_path: Path, out: Path) -> dict[str, Any]:
    """Write ``trace_path`` with truth columns joined from the spans to ``out``; the join's counts."""
    t = tracefmt.read_trace(trace_path)
    op = t["op"].cast(pa.string()).to_pylist()
    ids = t["id"].to_pylist()
    labels = t["label"].cast(pa.string()).to_pylist() if "label" in t.column_names else [None] * len(ids)
    calls = _calls_by_edge(t, op, ids)
    parent_row, stats, front = _join_spans(calls, labels, read_spans(spans_path))
    if "point" in t.column_names:
        # One capture point; eval reads a point column as synth's ("p1" first), so it goes.
        t = t.drop_columns(["point"])
    for name, column in _truth_columns(op, ids, parent_row).items():
        t = t.append_column(name, pa.array(column, pa.uint64()))
    tracefmt.write_trace(t, out)
    stats["requests"] = len(front)
    stats["joined_share"] = stats["joined"] / stats["calls"] if stats["calls"] else 0.0
    return stats


def _calls_by_edge(
    t: pa.Table, op: list[str], ids: list[int]
) -> dict[tuple[str, str], list[tuple[int, int, int]]]:
    """One entry per answered call: (sender, receiver) -> [(row of the call, t_call, t_return)]."""
    ts = t["timestamp"].cast(pa.int64()).to_numpy()
    snd = t["sender"].cast(pa.string()).to_pylist()
    rcv = t["receiver"].cast(pa.string()).to_pylist()
    ret_at = {ids[i]: int(ts[i]) for i in range(len(ts)) if op[i] == "return"}
    calls: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    for i in range(len(ts)):
        if op[i] == "call" and ids[i] in ret_at:
            calls[(snd[i], rcv[i])].append((i, int(ts[i]), ret_at[ids[i]]))
    return calls


def _join_spans(
    calls: dict[tuple[str, str], list[tuple[int, int, int]]],
    labels: list[str | None],
    spans: list[dict[str, Any]],
) -> tuple[dict[int, int], dict[str, Any], dict[int, int]]:
    """Each call's parent call (row -> row) from the apps' spans, the join's counts, and
    each request number's front call (client -> nginx, numbered in its label)."""
    by_id = {(s["service"], s["span"]): s for s in spans}
    server = defaultdict(list)
    client = defaultdict(list)
    for s in spans:
        if s["kind"] == 2:
            server[s["service"]].append(s)
        elif s["kind"] == 3:
            client[(s["service"], s["attrs"].get("peer.service"))].append(s)
    parent_row: dict[int, int] = {}  # call row -> its parent's call row
    stats: dict[str, Any] = {"calls": sum(len(v) for v in calls.values()), "joined": 0, "ambiguous": 0}
    front = {}  # request number -> row of its client -> nginx call
    for row, _, _ in calls.get(("client", "nginx"), []):
        n = _request_no((labels[row] or "").split(" ", 1)[-1])
        if n is not None:
            front[n] = row
            stats["joined"] += 1
    span_row: dict[tuple[str, str], int] = {}  # server span -> row of the nginx -> app call
    for app in sorted({s["service"] for s in spans}):
        cs = calls.get(("nginx", app), [])
        joined = _assign(cs, server[app], inside=False)
        stats["ambiguous"] += _fits(cs, server[app], inside=False)
        for row, k in joined.items():
            span = server[app][k]
            span_row[(app, span["span"])] = row
            n = _request_no(span["attrs"].get("http.target"))
            if n in front:
                parent_row[row] = front[n]
                stats["joined"] += 1
        for backend in BACKENDS:
            cs = calls.get((app, backend), [])
            sp = client[(app, backend)]
            stats["ambiguous"] += _fits(cs, sp, inside=True)
            for row, k in _assign(cs, sp, inside=True).items():
                up = by_id.get((app, sp[k]["parent"] or ""))
                if up is not None and (app, up["span"]) in span_row:
                    parent_row[row] = span_row[(app, up["span"])]
                    stats["joined"] += 1
    return parent_row, stats, front


def _truth_columns(op: list[str], ids: list[int], parent_row: dict[int, int]) -> dict[str, list[Any]]:
    """``true_call``, ``true_parent``, ``true_instance`` per message: a call and its return
    share true_call (the capture's id); roots have no parent."""
    call_row = {ids[i]: i for i in range(len(ids)) if op[i] == "call"}
    root_of: dict[int, int] = {}

    def root(row: int) -> int:
        seen = []
        while row in parent_row and row not in root_of:
            seen.append(row)
            row = parent_row[row]
        r = root_of.get(row, row)
        for s in seen:
            root_of[s] = r
        return r

    # Small numbers for the truth ids (the capture's ids use all 64 bits, eval wants < 2**63).
    number = {row: k + 1 for k, row in enumerate(sorted(call_row.values()))}
    tcall, tparent, tinst = [], [], []
    for i in range(len(ids)):
        row = call_row.get(ids[i], i)
        tcall.append(number.get(row, 0))
        p = parent_row.get(row)
        tparent.append(None if p is None else number[p])
        tinst.append(number.get(root(row), 0))
    return {"true_call": tcall, "true_parent": tparent, "true_instance": tinst}


def score(trace: Path, spans: Path, work: Path) -> dict[str, Any]:
    """Truth joined, default inference, ``wirepath eval``: the scores and the join's counts."""
    from realbed import wirepath

    truth = work / "truth.parquet"
    join = add_truth(trace, spans, truth)
    paths, inst = work / "truth-paths.json", work / "truth-inst.parquet"
    wirepath("infer", "nesting", str(truth), "--out", str(paths), "--instances", str(inst))
    doc = json.loads(wirepath("eval", str(paths), str(truth), "--instances", str(inst), "--json").stdout)
    return {"join": join, "eval": doc}


def score_loads(
    bed: Any, out: Path, requests: int, loads: list[int], think_s: float = 0.32
) -> dict[str, Any]:
    """One run per client count (the same mean think time, so more clients is more load);
    each scored per request against the spans."""
    rows = []
    for k, clients in enumerate(loads):
        run = bed.record(f"load{clients}", out, requests, clients, first=k * 1_000_000, think_s=think_s)
        s = score(run.bridge_trace, run.spans, run.dir)
        inst = s["eval"]["instances"]
        rows.append(
            {
                "clients": clients,
                "rate_per_s": run.load["rate_per_s"],
                "p50_ms": run.load["p50_ms"],
                "requests": inst["true"],
                "fully_right": inst["fully_right"],
                "fully_right_rate": inst["fully_right_rate"],
                "right_parent_rate": s["eval"]["calls"]["right_parent_rate"],
                "join": s["join"],
            }
        )
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "join"}), file=sys.stderr, flush=True)
    return {"think_s": think_s, "requests": requests, "loads": rows}
