"""A malformed paths file is one error line for viz draw and report, never a traceback:
children that are not a list, a count that is not a number, a NaN latency, a tree
thousands of visits deep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wirepath.cli import main


def _doc(root: dict, **pattern: object) -> dict:
    pat = {"id": "p1", "count": 3, "total_latency_s": 0.3, "root": root, **pattern}
    return {"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": [pat]}


def _visit(node: str, *children: dict, latency: float = 0.1) -> dict:
    stats = {"mean": latency, "p50": latency, "p90": latency, "p99": latency, "std": 0.0}
    return {"node": node, "caller": "c", "latency_s": stats, "delay_s": None, "children": list(children)}


def _deep(levels: int) -> str:
    """A paths file whose one pattern is a chain ``levels`` visits deep, as JSON text
    (built as text: json.dumps itself cannot go that deep)."""
    visit = json.dumps(_visit("n"))
    head, tail = visit.split('"children": []')
    tree = (
        head
        + '"children": ['
        + (head + '"children": [') * (levels - 1)
        + "]"
        + (tail + "]") * (levels - 1)
        + tail
    )
    doc = json.dumps(_doc({"node": "placeholder"}))
    return doc.replace(json.dumps({"node": "placeholder"}), tree)


CASES = {
    "children not a list": (json.dumps(_doc({**_visit("a"), "children": "x"})), "children"),
    "count not a number": (json.dumps(_doc(_visit("a"), count="many")), "count"),
    "NaN latency": (json.dumps(_doc(_visit("a", latency=float("nan")))), "finite"),
    "20,001 levels deep": (_deep(20_001), "deep"),
}


@pytest.mark.parametrize("verb", ["draw", "report"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_paths_file_is_one_error(capsys, tmp_path: Path, verb: str, case: str) -> None:
    text, expected = CASES[case]
    paths = tmp_path / "p.json"
    paths.write_text(text)  # NaN written as bare NaN, as a careless tool would
    out = tmp_path / ("x.dot" if verb == "draw" else "r.html")
    argv = ["viz", "draw", paths, "--out", out] if verb == "draw" else ["report", paths, "--out", out]
    rc = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert not out.exists()


@pytest.mark.parametrize("levels", [50, 3000])
def test_a_deep_but_sane_tree_still_draws(capsys, tmp_path: Path, levels: int) -> None:
    # A call chain thousands of levels deep is a real trace's (issue 39, item 17).
    paths = tmp_path / "p.json"
    paths.write_text(_deep(levels))
    assert main(["viz", "draw", str(paths), "--format", "dot", "--out", str(tmp_path / "x.dot")]) == 0
    assert main(["report", str(paths), "--out", str(tmp_path / "r.html")]) == 0
