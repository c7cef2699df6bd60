"""Shared inputs of the viz tests: a normal and a slow synthetic run, inferred once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import infer
import synth

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"


def _stats(x: float) -> dict[str, float]:
    return {"mean": x, "p50": x, "p90": x, "p99": x, "std": 0.0}


def visit(node: str, caller: str, latency: float, delay: float | None, *children: dict) -> dict[str, Any]:
    """A paths-file visit with every statistic equal to the given mean."""
    return {
        "node": node,
        "caller": caller,
        "latency_s": _stats(latency),
        "delay_s": None if delay is None else _stats(delay),
        "children": list(children),
    }


def paths_doc(*patterns: tuple[str, int, dict[str, Any]]) -> dict[str, Any]:
    """A nesting paths document of ``(id, count, root)`` patterns."""
    pats = [
        {"id": pid, "count": n, "total_latency_s": n * root["latency_s"]["mean"], "root": root}
        for pid, n, root in patterns
    ]
    return {
        "format": "wirepath.paths/1",
        "algorithm": "nesting",
        "params": {"x": 2.0},
        "trace": {"messages": 10, "start": None, "end": None},
        "stats": {"instances": sum(p["count"] for p in pats), "patterns": len(pats)},
        "patterns": pats,
    }


@pytest.fixture(scope="session")
def docs() -> Any:
    """``visit`` and ``paths_doc`` helpers for hand-written paths files."""

    return SimpleNamespace(visit=visit, paths_doc=paths_doc)


@pytest.fixture(scope="session")
def runs() -> dict[str, Any]:
    """Base and slow multitier runs (30,000 messages each, parallelism 2), with truth,
    inferred with the demo's settings."""
    out: dict[str, Any] = {}
    for name, file in (("base", "multitier.toml"), ("slow", "multitier-slow.toml")):
        config = replace(synth.load_config(SAMPLES / file), messages=30_000, parallelism=2.0, seed=3)
        trace, truth = synth.generate_table(config)
        result = infer.infer_nesting(trace)
        out[name] = {"trace": trace, "truth": truth, "result": result, "doc": result.to_json()}
    return out
