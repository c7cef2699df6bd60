"""The viz verbs in-process: viz draw, viz diff, report, export, demo, and their errors."""

from __future__ import annotations

import json

import pytest

from wirepath.cli import main


@pytest.fixture(scope="module")
def files(runs, tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    for name in ("base", "slow"):
        (d / f"{name}.json").write_text(json.dumps(runs[name]["doc"]))
    runs["slow"]["result"].write_instances(d / "inst.parquet")
    return d


def test_viz_draw_dot_needs_no_binary(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WIREPATH_DOT", "no-such-dot")
    out = tmp_path / "top.dot"
    assert main(["viz", "draw", str(files / "slow.json"), "--out", str(out), "--top", "2"]) == 0
    assert capsys.readouterr().out.startswith("drew 2 of ")
    assert out.read_text().count("subgraph") == 2


@pytest.mark.needs_dot
def test_viz_draw_svg_with_collapse_and_min_share(files, tmp_path, capsys):
    out = tmp_path / "top.svg"
    argv = [
        "viz",
        "draw",
        str(files / "slow.json"),
        "--out",
        str(out),
        "--collapse",
        "AP*",
        "--collapse",
        "DB*",
    ]
    assert main([*argv, "--min-share", "0.05", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert 1 <= doc["shown"] <= 5
    assert out.read_text().lstrip().startswith("<?xml")
    assert "AP*" in out.read_text()


@pytest.mark.needs_dot
def test_viz_diff_prints_the_sentence_and_draws(files, tmp_path, capsys):
    out = tmp_path / "d.svg"
    argv = ["viz", "diff", str(files / "base.json"), str(files / "slow.json"), "--out", str(out)]
    assert main([*argv, "--collapse", "AP*", "--collapse", "DB*"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("WS2 -> AP*: +0.2")
    assert "between its call to AUTH returning and its call to AP*" in text
    assert out.stat().st_size > 1000
    assert main([*argv, "--collapse", "AP*", "--collapse", "DB*", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"][0]["key"] == ["wait", "WS2", "AP*", "AUTH"]


@pytest.mark.needs_dot
def test_report_writes_one_file(files, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    argv = ["report", str(files / "slow.json"), "--diff", str(files / "base.json"), "--out", str(out)]
    assert main([*argv, "--top", "3", "--collapse", "AP*"]) == 0
    assert "self-contained" in capsys.readouterr().out
    assert out.read_text().count("<svg") == 4


@pytest.mark.parametrize("fmt", ["otlp", "zipkin", "jaeger"])
def test_export_each_format(files, tmp_path, capsys, fmt):
    out = tmp_path / f"t.{fmt}.json"
    assert (
        main(["export", str(files / "inst.parquet"), "--format", fmt, "--out", str(out), "--max-traces", "7"])
        == 0
    )
    assert capsys.readouterr().out.startswith("wrote 7 traces (")
    json.loads(out.read_text())


@pytest.mark.needs_dot
def test_demo_verb(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--messages", "20000", "--seed", "2"]) == 0
    captured = capsys.readouterr()
    assert "where the time went:\n  WS2 -> AP*: +0.2" in captured.out
    assert str(out / "report.html") in captured.out
    assert "convolution: at WS2, between AUTH -> WS2 and WS2 -> AP*" in captured.out
    assert "... synthesizing the base run" in captured.err
    assert (out / "report.html").exists()


def test_errors_are_one_line(files, tmp_path, capsys, monkeypatch):
    assert main(["viz", "draw", str(tmp_path / "nope.json")]) == 1
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nope.json'}: no such file"
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "wirepath.truth/1"}')
    assert main(["report", str(bad), "--out", str(tmp_path / "r.html")]) == 1
    assert "is not a paths file" in capsys.readouterr().err
    monkeypatch.setenv("WIREPATH_DOT", "no-such-dot")
    assert main(["viz", "draw", str(files / "slow.json"), "--out", str(tmp_path / "x.svg")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "apt-get install graphviz" in err
    assert (
        main(["viz", "draw", str(files / "slow.json"), "--out", str(tmp_path / "x.svg"), "--format", "png"])
        == 1
    )
    assert "--format png does not match" in capsys.readouterr().err
    assert main(["export", str(files / "inst.parquet"), "--format", "xml", "--out", "x.json"]) == 2
    assert (
        main(["export", str(files / "slow.json"), "--format", "otlp", "--out", str(tmp_path / "x.json")]) == 1
    )
    assert "not a readable Parquet file" in capsys.readouterr().err


def test_viz_diff_of_convolution_paths_prints_delay_changes(tmp_path, capsys):
    def conv(delay_s):
        return {
            "format": "wirepath.paths/1",
            "algorithm": "convolution",
            "paths": [{"nodes": ["c", "WS2", "AUTH", "WS2", "AP1"], "delays_s": [[0.005], [0.002], [delay_s]],
                       "counts": [10, 10, 10, 9]}],
        }  # fmt: skip

    for name, d in (("b", 0.001), ("s", 0.201)):
        (tmp_path / f"{name}.json").write_text(json.dumps(conv(d)))
    graph = tmp_path / "diff.dot"
    argv = ["viz", "diff", str(tmp_path / "b.json"), str(tmp_path / "s.json"), "--collapse", "AP*"]
    assert main([*argv, "--out", str(graph)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["+0.20", "s", "AUTH", "->", "WS2", "->", "AP*", "1", "ms", "->", "201", "ms,",
                              "about", "9", "messages"]  # fmt: skip
    assert out[-1] == f"drew the top 3 into {graph}"
    # The graph's first chain is the slowed hop, its middle box red.
    text = graph.read_text()
    assert 'label="#1 AUTH -> WS2 -> AP*: about 9 messages, +0.20 s"' in text
    assert '"h1_b" [label="WS2\\n1 ms -> 201 ms (+200 ms)", color="red3", penwidth="3"' in text
    # An unchanged hop is drawn grey.
    assert '"h2_b" [label="AUTH\\n2 ms -> 2 ms (+0 ns)", color="gray40"];' in text
