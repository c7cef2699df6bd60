"""Confidence in the viz verbs: ``viz draw``, ``report`` and ``export`` with ``--min-confidence``,
and ``report --truth --instances``'s reliability section.

What is tested, against numbers recomputed here from the paths file and the instances
table of one busy synthetic run:

* draw and report leave out exactly the patterns whose ``confidence`` is below P and
  say how many patterns and instances; a paths file without pattern confidence is a
  clear error with P > 0 and still works without it;
* report with ``--truth`` and ``--instances`` adds the ``confidence`` section (an inline
  SVG reliability diagram, the ``reliability`` table, counted here from the instances
  table), absent without ``--truth``; ``--truth`` without ``--instances`` is an error;
* export with P writes exactly the spans of the requests whose every link is at least
  P, and says how many requests and links it left out; every span carries
  ``wirepath.pattern_confidence`` (a double), server spans also ``wirepath.confidence``;
* an out-of-range P is a usage error for each verb.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from wirepath.cli import main

MULTITIER = Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml"


def cli(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    """Run ``wirepath ARGV`` in-process; returns (status, stdout, stderr)."""
    capsys.readouterr()
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_error(err: str) -> str:
    """The single ``error: ...`` line of a wirepath error."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


@dataclass
class Files:
    trace: Path
    paths: Path
    inst: Path
    noconf: Path  # the paths file without any confidence, as an older wirepath wrote it

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads(self.paths.read_text())

    @property
    def table(self) -> pa.Table:
        return pq.read_table(self.inst)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Files:
    """A multitier trace of 20,000 messages at parallelism 5, inferred once."""
    d = tmp_path_factory.mktemp("confidence_cli")
    trace, paths, inst = d / "t.parquet", d / "p.json", d / "i.parquet"
    argv = ["synth", MULTITIER, "--messages", 20000, "--parallelism", 5, "--seed", 11, "--out", trace]
    assert main([str(a) for a in argv]) == 0
    assert main(["infer", "nesting", str(trace), "--out", str(paths), "--instances", str(inst)]) == 0
    doc = json.loads(paths.read_text())
    for p in doc["patterns"]:
        del p["confidence"]
    del doc["stats"]["confidence"]
    noconf = d / "noconf.json"
    noconf.write_text(json.dumps(doc))
    return Files(trace, paths, inst, noconf)


def split(doc: dict[str, Any], p: float) -> tuple[list[str], list[dict[str, Any]]]:
    """The ids of the patterns kept at ``p`` (in file order), and those left out."""
    kept = [q["id"] for q in doc["patterns"] if q["confidence"] >= p]
    low = [q for q in doc["patterns"] if q["confidence"] < p]
    return kept, low


def left_out_patterns(doc: dict[str, Any], p: float) -> str:
    _, low = split(doc, p)
    instances = sum(q["count"] for q in low)
    return f"left out {len(low):,} patterns ({instances:,} instances) of confidence below {p:g}"


def linked(table: pa.Table) -> np.ndarray:
    return table["parent"].is_valid().to_numpy(zero_copy_only=False)


def test_the_run_has_patterns_on_both_sides(files: Files) -> None:
    confs = [p["confidence"] for p in files.doc["patterns"]]
    assert min(confs) < 0.8 <= max(confs)


# --- viz draw ------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.5, 0.8, 0.9, 1.0])
def test_draw_leaves_out_the_patterns_below(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str], p: float
) -> None:
    out = tmp_path / "x.dot"
    rc, text, err = cli(
        capsys, "viz", "draw", files.paths, "--out", out, "--top", 1000, "--min-confidence", p
    )
    assert rc == 0, err
    kept, _ = split(files.doc, p)
    assert text.strip().endswith(left_out_patterns(files.doc, p))
    assert text.startswith(f"drew {len(kept)} of {len(kept):,} patterns into {out}")
    drawn = re.findall(r'label="#\d+ ([0-9a-f]+)\\n', out.read_text())
    assert sorted(drawn) == sorted(kept)


@pytest.mark.needs_dot
def test_draw_svg_with_min_confidence(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.svg"
    rc, text, err = cli(capsys, "viz", "draw", files.paths, "--out", out, "--min-confidence", 0.8)
    assert rc == 0, err
    assert text.strip().endswith(left_out_patterns(files.doc, 0.8))
    kept, _ = split(files.doc, 0.8)
    svg = out.read_text()
    assert svg.lstrip().startswith("<?xml")
    top5 = kept[:5]
    assert all(pid in svg for pid in top5)
    assert not any(q["id"] in svg for q in split(files.doc, 0.8)[1])


def test_draw_without_min_confidence_says_nothing_left_out(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.dot"
    rc, text, err = cli(capsys, "viz", "draw", files.paths, "--out", out, "--top", 1000)
    assert rc == 0, err
    assert "left out" not in text
    assert len(re.findall(r'label="#\d+ ', out.read_text())) == len(files.doc["patterns"])


def test_draw_a_paths_file_without_confidence(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "x.dot"
    rc, _, err = cli(capsys, "viz", "draw", files.noconf, "--out", out, "--min-confidence", 0.5)
    assert rc == 1
    assert "no pattern confidence" in one_error(err)
    assert not out.exists()
    rc, text, err = cli(capsys, "viz", "draw", files.noconf, "--out", out, "--top", 3)
    assert rc == 0, err
    assert text.startswith(f"drew 3 of {len(files.doc['patterns']):,} patterns")


# --- report --------------------------------------------------------------------------------


def pattern_rows(html: str) -> list[str]:
    """The pattern ids in the report's table of top patterns, in order."""
    start = html.index('<table class="sortable" id="patterns">')
    table = html[start : html.index("</table>", start)]
    return re.findall(r'<a href="#pattern-([0-9a-f]+)">', table)


def section(html: str, head: str) -> str:
    """The text from ``head`` to the next ``<h2``."""
    start = html.index(head)
    end = html.find("<h2", start + len(head))
    return html[start : end if end >= 0 else len(html)]


@pytest.mark.needs_dot
def test_report_leaves_out_the_patterns_below(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    rc, text, err = cli(capsys, "report", files.paths, "--out", out, "--top", 1000, "--min-confidence", 0.8)
    assert rc == 0, err
    assert text.strip().endswith(left_out_patterns(files.doc, 0.8))
    html = out.read_text()
    kept, low = split(files.doc, 0.8)
    assert sorted(pattern_rows(html)) == sorted(kept)
    for q in low:
        assert f'id="pattern-{q["id"]}"' not in html
    # The table states each pattern's share exactly right.
    assert "exactly right" in html
    confidence = {q["id"]: q["confidence"] for q in files.doc["patterns"]}
    for pid in kept:
        row = re.search(rf'<a href="#pattern-{pid}">.*?</tr>', html)
        assert row, pid
        assert f">{confidence[pid]:.1%}</td>" in row[0]
    assert 'id="confidence"' not in html


@pytest.mark.needs_dot
def test_report_with_truth_shows_the_reliability_of_the_stated_confidence(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    argv = ["report", files.paths, "--out", out, "--truth", files.trace, "--instances", files.inst]
    rc, _, err = cli(capsys, *argv)
    assert rc == 0, err
    html = out.read_text()
    assert html.count('id="confidence"') == 1
    part = section(html, '<h2 id="confidence">')
    assert "<svg" in part
    assert 'id="reliability"' in part
    # The table's bins, counted here from the instances table: 10 equal bins of the
    # confidence of the calls given a parent.
    t = files.table
    conf = t["confidence"].to_numpy()[linked(t)]
    b = np.minimum(np.floor(conf * 10).astype(np.int64), 9)
    counts = Counter(b.tolist())
    body = part[part.index('id="reliability"') :]
    rows = re.findall(r"<tr><td>(\d\.\d)–(\d\.\d)</td><td[^>]*>([\d,]+)</td>", body)
    assert [(float(lo), int(n.replace(",", ""))) for lo, _, n in rows] == [
        (k / 10, counts[k]) for k in sorted(counts)
    ]
    # One dot per bin in the diagram.
    svg = part[part.index("<svg") : part.index("</svg>")]
    assert svg.count("<circle") == len(counts)
    # The paragraph's ECE is eval's.
    rc, text, err = cli(capsys, "eval", files.paths, files.trace, "--instances", files.inst, "--json")
    assert rc == 0, err
    calls = json.loads(text)["confidence"]["calls"]
    assert f"expected calibration error {calls['ece']:.3f}" in part

    # Without --truth there is no such section.
    plain = tmp_path / "plain.html"
    rc, _, err = cli(capsys, "report", files.paths, "--out", plain)
    assert rc == 0, err
    assert 'id="confidence"' not in plain.read_text()
    assert 'id="reliability"' not in plain.read_text()


@pytest.mark.parametrize("given", ["truth", "instances"])
def test_report_truth_and_instances_go_together(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    out = tmp_path / "r.html"
    extra = ["--truth", files.trace] if given == "truth" else ["--instances", files.inst]
    rc, _, err = cli(capsys, "report", files.paths, "--out", out, *extra)
    assert rc != 0
    line = one_error(err)
    assert "--truth" in line
    assert "--instances" in line
    assert not out.exists()


@pytest.mark.needs_dot
def test_report_of_a_paths_file_without_confidence(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.html"
    rc, _, err = cli(capsys, "report", files.noconf, "--out", out, "--min-confidence", 0.5)
    assert rc == 1
    assert "no pattern confidence" in one_error(err)
    assert not out.exists()
    rc, text, err = cli(capsys, "report", files.noconf, "--out", out, "--top", 3)
    assert rc == 0, err
    assert "left out" not in text
    html = out.read_text()
    assert len(pattern_rows(html)) == 3
    assert "exactly right" not in html


# --- export --------------------------------------------------------------------------------


def kept_rows(table: pa.Table, p: float) -> tuple[pa.Table, int, int]:
    """The rows of the requests whose every link is at least ``p``, the requests left
    out and their links below ``p``."""
    low = linked(table) & (table["confidence"].to_numpy() < p)
    inst = table["instance"].to_numpy()
    bad = set(inst[low].tolist())
    keep = np.array([i not in bad for i in inst.tolist()])
    return table.filter(pa.array(keep)), len(bad), int(low.sum())


def otlp_spans(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(service, span) of every span of an OTLP/JSON document."""
    out = []
    for rs in doc["resourceSpans"]:
        service = rs["resource"]["attributes"][0]["value"]["stringValue"]
        for ss in rs["scopeSpans"]:
            out += [(service, s) for s in ss["spans"]]
    return out


def attributes(span: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["key"]: a["value"] for a in span["attributes"]}


def test_export_otlp_keeps_exactly_the_confident_requests(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = 0.8
    out = tmp_path / "o.json"
    rc, text, err = cli(capsys, "export", files.inst, "--format", "otlp", "--out", out, "--min-confidence", p)
    assert rc == 0, err
    kept, requests, links = kept_rows(files.table, p)
    assert requests > 0
    roots = int((~linked(kept)).sum())
    assert text.strip() == (
        f"wrote {roots:,} traces ({2 * kept.num_rows:,} spans) as otlp to {out}; left out "
        f"{requests:,} requests holding {links:,} links of confidence below {p:g}"
    )
    spans = otlp_spans(json.loads(out.read_text()))
    server = [(svc, s) for svc, s in spans if s["kind"] == 2]
    client = [(svc, s) for svc, s in spans if s["kind"] == 3]
    assert len(client) == kept.num_rows  # a client span per call, at its caller
    assert sum("parentSpanId" not in s for _, s in client) == roots
    assert len({s["traceId"] for _, s in spans}) == roots
    # The server spans are the kept calls: callee, call and return times.
    got = Counter((svc, int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"])) for svc, s in server)
    want = Counter(
        zip(
            kept["callee"].cast(pa.string()).to_pylist(),
            kept["t_call"].cast(pa.int64()).to_pylist(),
            kept["t_return"].cast(pa.int64()).to_pylist(),
            strict=True,
        )
    )
    assert got == want
    for _, s in server:
        assert attributes(s)["wirepath.confidence"]["doubleValue"] >= p


def test_export_spans_carry_the_pattern_confidence(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.json"
    rc, _, err = cli(capsys, "export", files.inst, "--format", "otlp", "--out", out)
    assert rc == 0, err
    t = files.table
    by_call = {
        (callee, t0, t1): (conf, pconf)
        for callee, t0, t1, conf, pconf in zip(
            t["callee"].cast(pa.string()).to_pylist(),
            t["t_call"].cast(pa.int64()).to_pylist(),
            t["t_return"].cast(pa.int64()).to_pylist(),
            t["confidence"].to_pylist(),
            t["pattern_confidence"].to_pylist(),
            strict=True,
        )
    }
    assert len(by_call) == t.num_rows
    stated = {q["id"]: q["confidence"] for q in files.doc["patterns"]}
    spans = otlp_spans(json.loads(out.read_text()))
    assert len(spans) == 2 * t.num_rows  # a client and a server span a call
    for svc, s in spans:
        a = attributes(s)
        assert set(a["wirepath.pattern_confidence"]) == {"doubleValue"}
        pconf = a["wirepath.pattern_confidence"]["doubleValue"]
        assert pconf == pytest.approx(stated[a["wirepath.pattern"]["stringValue"]], abs=1e-6)
        if s["kind"] == 2:
            conf, row_pconf = by_call[(svc, int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]))]
            assert a["wirepath.confidence"] == {"doubleValue": conf}
            assert pconf == row_pconf
        else:
            assert "wirepath.confidence" not in a


def jaeger_spans(doc: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    return {t["traceID"]: t["spans"] for t in doc["data"]}


def zipkin_spans(doc: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for s in doc:
        out.setdefault(s["traceId"], []).append(s)
    return out


def tag(span: dict[str, Any], key: str, fmt: str) -> tuple[str, Any] | None:
    """(type, value) of a span's tag in Jaeger or Zipkin form; None when absent."""
    if fmt == "zipkin":
        return ("string", span["tags"][key]) if key in span["tags"] else None
    for t in span["tags"]:
        if t["key"] == key:
            return t["type"], t["value"]
    return None


@pytest.mark.parametrize("fmt", ["jaeger", "zipkin"])
def test_export_min_confidence_is_the_same_filter_in_every_format(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    p = 0.8
    full, part = tmp_path / "full.json", tmp_path / "part.json"
    rc, _, err = cli(capsys, "export", files.inst, "--format", fmt, "--out", full)
    assert rc == 0, err
    rc, text, err = cli(capsys, "export", files.inst, "--format", fmt, "--out", part, "--min-confidence", p)
    assert rc == 0, err
    kept, requests, links = kept_rows(files.table, p)
    assert text.strip().endswith(
        f"left out {requests:,} requests holding {links:,} links of confidence below {p:g}"
    )
    read = jaeger_spans if fmt == "jaeger" else zipkin_spans
    every, some = read(json.loads(full.read_text())), read(json.loads(part.read_text()))

    def is_server(s: dict[str, Any]) -> bool:
        if fmt == "jaeger":
            return tag(s, "span.kind", fmt) == ("string", "server")
        return s["kind"] == "SERVER"

    def confident(spans: list[dict[str, Any]]) -> bool:
        confs = [tag(s, "wirepath.confidence", fmt) for s in spans if is_server(s)]
        assert all(c is not None for c in confs)
        return all(float(c[1]) >= p for c in confs if c is not None)

    # The traces written with P are exactly the full export's traces whose every call is
    # at least P, span for span.
    assert some == {tid: spans for tid, spans in every.items() if confident(spans)}
    assert len(some) == int((~linked(kept)).sum())
    assert sum(len(s) for s in some.values()) == 2 * kept.num_rows  # a client and a server span a call
    double = "float64" if fmt == "jaeger" else "string"
    for spans in every.values():
        for s in spans:
            pc = tag(s, "wirepath.pattern_confidence", fmt)
            assert pc is not None
            assert pc[0] == double
            assert 0.0 <= float(pc[1]) <= 1.0


# --- bad thresholds ------------------------------------------------------------------------


def verb_argv(files: Files, tmp_path: Path, verb: str) -> list[object]:
    return {
        "draw": ["viz", "draw", files.paths, "--out", tmp_path / "x.dot"],
        "report": ["report", files.paths, "--out", tmp_path / "x.html"],
        "export": ["export", files.inst, "--format", "otlp", "--out", tmp_path / "x.json"],
    }[verb]


@pytest.mark.parametrize("value", ["2", "-0.1", "abc"])
@pytest.mark.parametrize("verb", ["draw", "report", "export"])
def test_out_of_range_min_confidence_is_a_usage_error(
    files: Files, tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str, value: str
) -> None:
    rc, out, err = cli(capsys, *verb_argv(files, tmp_path, verb), "--min-confidence", value)
    assert rc == 2
    assert out == ""
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err
    assert "--min-confidence" in errors[0]
    assert value in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_min_confidence_on_convolution_paths_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conv = {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "paths": [{"nodes": ["c", "a", "b"], "delays_s": [[0.001]], "counts": [5, 5]}],
    }
    paths = tmp_path / "c.json"
    paths.write_text(json.dumps(conv))
    rc, _, err = cli(capsys, "viz", "draw", paths, "--out", tmp_path / "x.dot", "--min-confidence", 0.5)
    assert rc == 1
    assert "convolution" in one_error(err)
    rc, _, err = cli(capsys, "viz", "draw", paths, "--out", tmp_path / "x.dot")
    assert rc == 0, err
