"""DOT generation, checked without the binary and (marked needs_dot) by graphviz's own parser."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tracefmt import ParameterError, SchemaError, check_paths
from tracefmt.patterns import latency_stats
from viz.dot import convolution_dot, dot_quote, paths_dot, pattern_dot, share_color
from viz.paths import collapse_replicas, select_patterns, self_times


def _dot_json(text: str) -> dict:
    """Graphviz's own reading of a DOT text (``dot -Tjson``, layout included)."""
    done = subprocess.run(["dot", "-Tjson"], input=text.encode(), capture_output=True, check=True)
    return json.loads(done.stdout)


def _three_tier(docs):
    v = docs.visit
    db = v("DB1", "AP1", 0.020, 0.002)
    ap = v("AP1", "WS1", 0.026, 0.003, db)
    auth = v("AUTH", "WS1", 0.004, 0.001)
    return v("WS1", "client", 0.040, None, auth, ap)


def test_self_times_are_latency_minus_children(docs):
    # WS1: 40 - (4 + 26) = 10 ms; AUTH 4; AP1 26 - 20 = 6; DB1 20.
    assert np.allclose(self_times(_three_tier(docs)), [0.010, 0.004, 0.006, 0.020])


def test_pattern_dot_highlights_the_visit_holding_most_latency(docs):
    pat = docs.paths_doc(("p1", 7, _three_tier(docs)))["patterns"][0]
    text = pattern_dot(pat, rank=1)
    lines = {line.split(" [")[0].strip(): line for line in text.splitlines() if line.strip().startswith('"v')}
    # DB1 spends 20 of 40 ms itself: half, the most of any visit.
    assert 'color="red3"' in lines['"v3"']
    assert 'penwidth="3"' in lines['"v3"']
    assert all("red3" not in lines[f'"v{k}"'] for k in range(3))
    saturation = {k: float(lines[f'"v{k}"'].split('fillcolor="')[1].split()[1]) for k in range(4)}
    # Fill saturation follows the share of the request's 40 ms: 10, 4, 6, 20 ms.
    assert np.allclose(
        [saturation[k] for k in range(4)], [0.85 * s for s in (0.25, 0.1, 0.15, 0.5)], atol=1e-3
    )
    assert share_color(1.0) == share_color(2.0) != share_color(0.0)
    assert "self 20 ms (50%)" in lines['"v3"']
    assert "×7  mean 40 ms" in lines['"v0"']
    # Edges carry the mean delay from the parent's call; the header the count and total.
    assert '"v2" -> "v3" [label="+2 ms"];' in text
    assert '"caller" -> "v0" [label="×7"];' in text
    assert "7 instances, total 280 ms" in text


@pytest.mark.needs_dot
def test_graphviz_draws_odd_names_exactly(docs):
    odd = ['say "hi"', "back\\slash", "<script>alert(1)</script>", "two\nlines", "ünï"]
    v = docs.visit
    root = v(odd[0], odd[4], 0.01, None, *(v(n, odd[0], 0.001, 0.001) for n in odd[1:4]))
    text = pattern_dot(docs.paths_doc(("x", 1, root))["patterns"][0])
    svg = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True, check=True).stdout
    ns = "{http://www.w3.org/2000/svg}"
    shown = [t.text for t in ET.fromstring(svg).iter(f"{ns}text")]
    # What the picture shows, line by line: every name exactly (a line break splits one).
    for name in ['say "hi"', "back\\slash", "<script>alert(1)</script>", "ünï", "two", "lines"]:
        assert name in shown
    assert b"<script>" not in svg  # escaped in the SVG's XML


def test_dot_quote_escapes_only_what_dot_needs():
    assert dot_quote('a"b') == '"a\\"b"'
    assert dot_quote("a\\b") == '"a\\\\b"'
    assert dot_quote("<b>") == '"<b>"'


def _conv_doc():
    # Written by hand after docs/files.md: counts has len(nodes)-1 entries, delays_s len(nodes)-2.
    return {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "params": {"quantum_s": 0.001},
        "paths": [
            {
                "nodes": ["client", "WS2", "AP1", "DB1"],
                "delays_s": [[0.021, 0.221], [0.003]],
                "counts": [1234, 1200, 1180],
            },
            {"nodes": ["client", "WS1"], "delays_s": [], "counts": [999]},
        ],
        "graph": {"vertices": [], "edges": []},
    }


def test_convolution_path_is_a_chain_with_delays_and_counts():
    doc = _conv_doc()
    check_paths(doc)
    text = paths_dot(doc)
    edges = [line.strip() for line in text.splitlines() if line.strip().startswith('"c') and "->" in line]
    assert edges == [
        '"c0n0" -> "c0n1" [label="1,234 msgs"];',
        '"c0n1" -> "c0n2" [label="1,200 msgs\\nafter 21 ms, 221 ms"];',
        '"c0n2" -> "c0n3" [label="1,180 msgs\\nafter 3 ms"];',
        '"c1n0" -> "c1n1" [label="999 msgs"];',
    ]
    assert len(convolution_dot(doc, top=1).split("subgraph")) == 2


def test_convolution_answer_hop_shows_its_median():
    doc = _conv_doc()
    doc["paths"][0]["medians_s"] = [None, 0.0045]
    check_paths(doc)
    assert '"c0n2" -> "c0n3" [label="1,180 msgs\\nafter 3 ms\\nmedian 4.5 ms"];' in paths_dot(doc)


@pytest.mark.needs_dot
def test_convolution_chain_lays_out_in_graphviz():
    graph = _dot_json(paths_dot(_conv_doc()))
    assert len(graph["edges"]) == 4
    names = {o["_gvid"]: o.get("label") for o in graph["objects"] if "nodes" not in o}
    assert [names[e["head"]] for e in graph["edges"][:3]] == ["WS2", "AP1", "DB1"]


def test_convolution_path_with_wrong_counts_is_rejected():
    doc = _conv_doc()
    doc["paths"][0]["counts"] = [1, 2]
    with pytest.raises(SchemaError, match="needs len\\(nodes\\) - 1 = 3 counts"):
        check_paths(doc)


def _many(docs):
    v = docs.visit
    return docs.paths_doc(
        ("slow", 2, v("WS1", "c", 1.0, None)),  # total 2.0
        ("common", 50, v("WS2", "c", 0.01, None)),  # total 0.5
        ("rare", 1, v("WS3", "c", 0.1, None)),  # total 0.1
    )


def test_select_top_sort_and_min_share(docs):
    doc = _many(docs)
    assert [p["id"] for p in select_patterns(doc)] == ["slow", "common", "rare"]
    assert [p["id"] for p in select_patterns(doc, sort="count")] == ["common", "slow", "rare"]
    assert [p["id"] for p in select_patterns(doc, top=1)] == ["slow"]
    # Shares of 2.6 s: 77%, 19%, 4%.
    assert [p["id"] for p in select_patterns(doc, min_share=0.05)] == ["slow", "common"]
    assert [p["id"] for p in select_patterns(doc, sort="count", min_share=0.5)] == ["common"]
    assert paths_dot(doc, top=2).count("subgraph") == 2


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sort": "size"}, "unknown sort 'size' \\(must be one of total, count\\)"),
        ({"top": 0}, "top must be at least 1"),
        ({"min_share": 1.5}, "min_share must be between 0 and 1"),
    ],
)
def test_select_rejects_bad_values(docs, kwargs, message):
    with pytest.raises(ParameterError, match=message):
        select_patterns(_many(docs), **kwargs)


def test_empty_paths_file_draws_an_empty_graph(docs):
    text = paths_dot(docs.paths_doc())
    assert text.startswith('digraph "paths" {')
    assert "subgraph" not in text


def test_collapse_pools_means_and_stds_exactly(docs):
    rng = np.random.default_rng(7)
    a, b = rng.normal(0.010, 0.002, 300), rng.normal(0.030, 0.004, 100)
    v = docs.visit
    doc = docs.paths_doc(("a", 300, v("WS1", "c", 0, None)), ("b", 100, v("WS2", "c", 0, None)))
    doc["patterns"][0]["root"]["latency_s"] = latency_stats(a)
    doc["patterns"][1]["root"]["latency_s"] = latency_stats(b)
    merged = collapse_replicas(doc, ["WS*"])
    assert len(merged["patterns"]) == 1
    pat = merged["patterns"][0]
    union = latency_stats(np.concatenate([a, b]))
    assert pat["count"] == 400
    assert pat["root"]["node"] == "WS*"
    assert pat["root"]["latency_s"]["mean"] == pytest.approx(union["mean"], rel=1e-12)
    assert pat["root"]["latency_s"]["std"] == pytest.approx(union["std"], rel=1e-12)
    assert pat["approx_percentiles"] is True
    assert sorted(pat["merged_ids"]) == ["a", "b"]


def test_collapse_keeps_different_shapes_apart_and_matches_truth(runs):
    # The true patterns of the synthetic trace, collapsed over AP and DB replicas, are the
    # shapes client>WS(AUTH?, AP(DB)) with WS1/WS2 kept apart: counts add up per shape.
    truth = {**runs["base"]["truth"], "format": "wirepath.paths/1", "algorithm": "nesting"}
    merged = collapse_replicas(truth, ["AP*", "DB*"])
    counts: dict[tuple[str, bool], int] = {}
    for p in truth["patterns"]:
        kids = [c["node"] for c in p["root"]["children"]]
        key = (p["root"]["node"], "AUTH" in kids)
        counts[key] = counts.get(key, 0) + p["count"]
    got = {
        (p["root"]["node"], any(c["node"] == "AUTH" for c in p["root"]["children"])): p["count"]
        for p in merged["patterns"]
    }
    assert got == counts
    assert len(merged["patterns"]) == 4


def test_collapse_refuses_convolution_paths():
    with pytest.raises(ParameterError, match="collapsing replicas applies to nesting"):
        collapse_replicas(_conv_doc(), ["WS*"])


def test_many_convolution_paths_are_drawn_as_rows_not_a_wide_strip():
    # Twelve paths of five services, as convolution gives on a busy trace: the real dot
    # draws each as a row, the rows one under another, so the drawing stays readable.
    services = ["client", "nginx", "app", "redis", "postgres"]
    paths = [
        {
            "nodes": [services[0], *services[1 + k % 2 :], f"backend-{k}"],
            "counts": [1_000 - k] * (len(services) - k % 2),
            "delays_s": [[0.0021, 0.0132]] * (len(services) - 1 - k % 2),
        }
        for k in range(12)
    ]
    doc = {"algorithm": "convolution", "paths": paths}
    svg = subprocess.run(
        ["dot", "-Tsvg"], input=convolution_dot(doc).encode(), capture_output=True, check=True
    )
    root = ET.fromstring(svg.stdout)
    width, height = (float(root.get(k).removesuffix("pt")) for k in ("width", "height"))
    assert width < 1_300
    assert height > width
