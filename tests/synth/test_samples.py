"""Every shipped workload in samples/synth/ loads and generates a consistent trace."""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

import synth

SAMPLES = sorted((Path(__file__).resolve().parents[2] / "samples" / "synth").glob("*.toml"))


def test_the_samples_are_there() -> None:
    names = {p.stem for p in SAMPLES}
    assert {"multitier", "multitier-slow", "petstore", "petstore-slow", "mail"} <= names
    assert {"children-0-2", "children-d-cc", "children-parallel", "penalty-breaker"} <= names


@pytest.mark.parametrize("path", SAMPLES, ids=[p.stem for p in SAMPLES])
def test_sample_generates(path: Path, h) -> None:
    cfg = synth.load_config(path)
    assert cfg.path == str(path)
    cfg = dataclasses.replace(cfg, messages=3000, duration_s=None)
    table, truth = synth.generate_table(cfg)
    m = h.msgs(table)
    assert m.size >= 3000
    assert np.all(np.diff(m.ts) >= 0)
    assert set(m.sender.tolist()) | set(m.receiver.tolist()) <= set(cfg.nodes)
    first: dict[int, str] = {}
    for inst, pat in zip(m.inst.tolist(), m.pattern.tolist(), strict=True):
        assert first.setdefault(inst, pat) == pat  # one pattern per instance
    assert truth["instances"] == len(first)
    assert {p["id"]: p["count"] for p in truth["patterns"]} == dict(Counter(first.values()))
    kinds = {t.kind for t in cfg.tracelets}
    if kinds == {"messages"}:
        assert set(m.op.tolist()) == {"send"}
        expected = h.message_pattern_ids(m)
    else:
        assert set(m.op.tolist()) == {"call", "return"}
        c = h.calls(m)
        assert np.all(c.t_ret >= c.t_call)
        expected = h.rpc_pattern_ids(c)
    assert expected == first


def test_mail_is_one_way_hops(h) -> None:
    cfg = synth.load_config(next(p for p in SAMPLES if p.stem == "mail"))
    table, _ = synth.generate_table(dataclasses.replace(cfg, messages=3000, duration_s=None))
    m = h.msgs(table)
    assert set(m.op.tolist()) == {"send"}
    assert np.all(m.id == -1)
    assert np.all((m.ts - cfg.start_ns) % 10**9 == 0)  # whole seconds
    chains: dict[int, list[int]] = defaultdict(list)
    # Hops of one instance in causal order: each hop's parent is the previous hop.
    for i in range(m.size):
        chains[int(m.inst[i])].append(i)
    by_call = {int(m.call[i]): i for i in range(m.size)}
    for rows in chains.values():
        roots = [i for i in rows if m.parent[i] == -1]
        assert len(roots) == 1
        assert m.sender[roots[0]] in ("sender1", "sender2", "sender3")
        for i in rows:
            if m.parent[i] != -1:
                prev = by_call[int(m.parent[i])]
                assert m.inst[prev] == m.inst[i]
                assert m.receiver[prev] == m.sender[i]
                assert m.ts[prev] <= m.ts[i]
        # The parent links make one chain through all the instance's hops.
        assert len({int(m.parent[i]) for i in rows}) == len(rows)


def test_multitier_slow_delay_at_ws2(h) -> None:
    # WS2 waits 201 ms between its children (AUTH, then AP), WS1 1 ms.
    cfg = synth.load_config(next(p for p in SAMPLES if p.stem == "multitier-slow"))
    cfg = dataclasses.replace(cfg, messages=8000, duration_s=None, resolution_ns=1, parallelism=4.0)
    c = h.calls(h.msgs(synth.generate_table(cfg)[0]))
    kids = c.children()
    gaps: dict[str, list[float]] = defaultdict(list)
    for parent, ks in kids.items():
        if len(ks) == 2 and c.callee[parent] in ("WS1", "WS2"):
            assert c.callee[ks[0]] == "AUTH"
            gaps[str(c.callee[parent])].append((c.t_call[ks[1]] - c.t_ret[ks[0]]) / 1e9)
    h.check_normal(np.array(gaps["WS1"]), 0.001, 0.0002)
    h.check_normal(np.array(gaps["WS2"]), 0.201, 0.0002)
