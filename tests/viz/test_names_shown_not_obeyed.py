"""Names from the data shown, never obeyed (issue 39, items 20, 21 and 22): node names in
``viz diff`` of convolution paths printed escaped, test, testbed and build names in the
trend alert escaped for Markdown and HTML, and a node name longer than dot takes drawn
shortened while the data keeps it whole."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tracefmt import read_paths
from viz.dot import MAX_LABEL, shorten_label
from wirepath.cli import main

EVIL = "WS2\nerror: FAKE LINE2\x1b[31m"


def _convolution(delay_s: float, middle: str) -> dict:
    path = {"nodes": ["c", middle, "AP1"], "delays_s": [[delay_s]], "counts": [10, 8]}
    return {"format": "wirepath.paths/1", "algorithm": "convolution", "paths": [path]}


def test_viz_diff_of_convolution_paths_prints_names_escaped(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    base, slow = tmp_path / "b.json", tmp_path / "s.json"
    base.write_text(json.dumps(_convolution(0.001, EVIL)))
    slow.write_text(json.dumps(_convolution(0.201, EVIL)))
    argv = ["viz", "diff", str(base), str(slow), "--format", "dot", "--out", str(tmp_path / "d.dot")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert not [line for line in out.splitlines() if line.startswith("error:")]
    assert "\x1b" not in out
    assert "WS2\\nerror: FAKE LINE2" in out


HOSTILE = {
    "script": "<script>alert(1)</script>",
    "image": "<img src=x onerror=alert(1)>",
    "link": "[click](javascript:alert(1))",
    "comment": "<!-- the rest is hidden",
    "markup": "**bold** _it_ `code` ~~gone~~ a|b",
}


@pytest.fixture
def hostile_store(tmp_path: Path) -> Path:
    rows = []
    for k, name in enumerate(HOSTILE.values()):
        for b in range(30):
            value = 100.0 if b < 24 else 50.0  # a regression over the last six builds
            rows.append(
                {
                    "test": name,
                    "testbed": f"tb<{k}>",
                    "build": f"<b>{b}</b>",
                    "time": f"2026-09-{b + 1:02d}T02:00:00Z",
                    "value": value + (b % 3) * 0.01,
                }
            )
    with open(tmp_path / "r.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    store = tmp_path / "store"
    assert main(["trend", "import", str(tmp_path / "r.csv"), "--store", str(store)]) == 0
    return store


def test_the_trend_alert_escapes_names_for_markdown_and_html(
    capsys: pytest.CaptureFixture[str], hostile_store: Path, tmp_path: Path
) -> None:
    alert = tmp_path / "alert.md"
    capsys.readouterr()
    assert main(["trend", "check", "--store", str(hostile_store), "--alert", str(alert)]) == 1
    text = alert.read_text()
    assert capsys.readouterr().out.strip() == text.strip()
    table = [line for line in text.splitlines() if line.startswith("| ") and "since build" not in line]
    assert len(table) == len(HOSTILE)
    assert "<" not in text  # no tag, no comment: every < is &lt;
    for line in table:
        # Five columns after the name's: no bar the name brought in splits a cell.
        assert line.replace("\\|", "").count("|") == 8
    assert "\\[click\\](javascript:alert(1))" in text
    assert "\\*\\*bold\\*\\* \\_it\\_ \\`code\\` \\~\\~gone\\~\\~ a\\|b" in text
    assert "&lt;b&gt;24&lt;/b&gt;" in text  # the build the regression started at


def _paths_with_name(name: str) -> dict:
    visit = {"node": name, "caller": "client", "latency_s": {"mean": 0.01}, "delay_s": None, "children": []}
    pattern = {"id": "a", "count": 3, "total_latency_s": 0.03, "root": visit}
    return {"format": "wirepath.paths/1", "algorithm": "nesting", "patterns": [pattern]}


def test_a_label_over_16_kb_is_shortened_for_drawing() -> None:
    label = shorten_label("N" * 20_000 + "\nmean 1 ms")
    assert len(label) <= MAX_LABEL
    assert label.endswith("\nmean 1 ms")


@pytest.mark.needs_dot
@pytest.mark.parametrize("verb", ["viz draw", "report"])
def test_a_node_name_over_16_kb_is_drawn_shortened(tmp_path: Path, verb: str) -> None:
    name = "N" * 17_000 + "END"
    paths = tmp_path / "p.json"
    paths.write_text(json.dumps(_paths_with_name(name)))
    out = tmp_path / ("p.svg" if verb == "viz draw" else "r.html")
    argv = (
        ["viz", "draw", str(paths), "--out", str(out)]
        if verb == "viz draw"
        else ["report", str(paths), "--out", str(out)]
    )
    assert main(argv) == 0
    drawn = out.read_text()
    assert "<svg" in drawn
    assert "END" in drawn
    if verb == "viz draw":  # the report's text shows the pattern whole, its drawing shortened
        assert "N" * 17_000 not in drawn
    assert read_paths(paths)["patterns"][0]["root"]["node"] == name
