"""Odd inputs get one line, never a traceback, and never fill memory (issue 39, items
11, 12, 15, 16, 17 and 19): endless and deeply nested configuration files, symbolic link
loops, hand-edited paths files, call chains thousands of levels deep, and timestamps
at the ends of the int64 range."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import synth
from tracefmt import read_paths
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "samples" / "synth" / "multitier.toml"


def _one_error(capsys: pytest.CaptureFixture[str], rc: int) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc in (1, 3), err  # the trend verbs say 3 for an input they cannot use
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "t.parquet"
    synth.generate_trace(replace(synth.load_config(CONFIG), messages=2000), path)
    return path


@pytest.fixture(scope="module")
def paths_files(trace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("paths")
    out = {"nesting": d / "p.json", "convolution": d / "c.json"}
    assert (
        main(["infer", "nesting", str(trace), "--out", str(out["nesting"]), "--no-calibrate", "--quiet"]) == 0
    )
    argv = ["infer", "convolution", str(trace), "--quantum", "1ms", "--out", str(out["convolution"])]
    assert main([*argv, "--quiet"]) == 0
    return out


# --- item 11: endless inputs are refused after a bounded read ------------------------------


def _endless(tmp_path: Path, name: str) -> str:
    link = tmp_path / name
    link.symlink_to("/dev/zero")
    return str(link)


@pytest.mark.parametrize(
    "argv",
    [
        ["synth", "{zero.toml}", "--out", "{out.parquet}"],
        ["merge", "{trace}", "--names", "{zero.toml}", "--out", "{out.parquet}"],
        ["capture", "pcap", "{trace}", "--names", "{zero.toml}", "--out", "{out.parquet}"],
        ["viz", "draw", "{zero.json}", "--out", "{out.svg}"],
        ["trend", "import", "{zero.csv}", "--store", "{store}"],
        ["trend", "wda", "--config", "{zero.json}", "{zero.csv}"],
        ["trend", "compare", "--parent-file", "{zero.json}", "--current-file", "{zero.json}"],
    ],
    ids=["synth", "merge-names", "capture-names", "viz-draw", "trend-import", "trend-wda", "trend-compare"],
)
def test_an_endless_input_is_refused_after_a_bounded_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trace: Path, argv: list[str]
) -> None:
    names = {
        "trace": str(trace),
        "store": str(tmp_path / "store"),
        **{f"zero.{ext}": _endless(tmp_path, f"zero.{ext}") for ext in ("toml", "json", "csv")},
        **{f"out.{ext}": str(tmp_path / f"out.{ext}") for ext in ("parquet", "svg")},
    }
    line = _one_error(capsys, main([names.get(a.strip("{}"), a) for a in argv]))
    assert "longer than" in line
    assert "is it the right file?" in line
    assert not list(tmp_path.glob("out.*"))


# --- item 16: a document nested 100,000 deep is one line --------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["synth", "{deep.toml}", "--out", "{out}"],
        ["merge", "{trace}", "--names", "{deep.toml}", "--out", "{out}"],
        ["capture", "pcap", "{trace}", "--names", "{deep.toml}", "--out", "{out}"],
        ["trend", "import", "{deep.json}", "--store", "{store}"],
        ["trend", "wda", "--config", "{deep.json}", "{deep.json}"],
        ["trend", "compare", "--parent-file", "{deep.json}", "--current-file", "{deep.json}"],
        ["viz", "draw", "{deep.json}", "--out", "{out}"],
    ],
    ids=["synth", "merge-names", "capture-names", "trend-import", "trend-wda", "trend-compare", "viz-draw"],
)
def test_a_document_nested_100000_deep_is_one_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trace: Path, argv: list[str]
) -> None:
    n = 100_000
    (tmp_path / "deep.toml").write_text("a = " + "[" * n + "]" * n + "\n")
    (tmp_path / "deep.json").write_text('{"a": ' + "[" * n + "]" * n + "}")
    names = {
        "trace": str(trace),
        "store": str(tmp_path / "store"),
        "out": str(tmp_path / "out.parquet"),
        "deep.toml": str(tmp_path / "deep.toml"),
        "deep.json": str(tmp_path / "deep.json"),
    }
    line = _one_error(capsys, main([names.get(a.strip("{}"), a) for a in argv]))
    assert "deep" in line
    assert not (tmp_path / "out.parquet").exists()


def test_a_parent_file_nested_deep_as_json_object_is_one_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"t": ' + "[" * 100_000 + "]" * 100_000 + "}")
    line = _one_error(
        capsys, main(["trend", "compare", "--parent-file", str(deep), "--current-file", str(deep)])
    )
    assert "nested 100001 levels deep (at most 100 allowed)" in line


# --- item 12: symbolic link loops --------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["convert", "{loop.parquet}", "{out.txt}"],
        ["convert", "{trace}", "{loop.parquet}"],
        ["infer", "nesting", "{loop.parquet}", "--out", "{out.json}"],
        ["infer", "nesting", "{trace}", "--out", "{loop.json}"],
        ["infer", "convolution", "{trace}", "--quantum", "1ms", "--out", "{loop.json}"],
        ["capture", "pcap", "{loop.pcap}", "--out", "{out.parquet}"],
        ["merge", "{loop.parquet}", "--out", "{out.parquet}"],
        ["merge", "{trace}", "--out", "{loop.parquet}"],
        ["viz", "draw", "{loop.json}", "--out", "{out.svg}"],
        ["report", "{loop.json}", "--out", "{out.html}"],
        ["export", "{loop.parquet}", "--format", "otlp", "--out", "{out.json}"],
        ["synth", "{loop.toml}", "--out", "{out.parquet}"],
        ["synth", str(CONFIG), "--messages", "100", "--out", "{loop.parquet}"],
    ],
    ids=[
        "convert in",
        "convert out",
        "infer nesting in",
        "infer nesting out",
        "infer convolution out",
        "capture pcap in",
        "merge in",
        "merge out",
        "viz draw in",
        "report in",
        "export in",
        "synth config",
        "synth out",
    ],
)
def test_a_symlink_loop_is_one_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, trace: Path, argv: list[str]
) -> None:
    names: dict[str, str] = {"trace": str(trace)}
    for ext in ("parquet", "json", "pcap", "toml"):
        loop = tmp_path / f"loop.{ext}"
        loop.symlink_to(loop.name)
        names[f"loop.{ext}"] = str(loop)
    for ext in ("txt", "json", "parquet", "svg", "html"):
        names[f"out.{ext}"] = str(tmp_path / f"out.{ext}")
    _one_error(capsys, main([names.get(a.strip("{}"), a) for a in argv]))
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith("loop.")]


# --- item 15: hand-edited paths files ---------------------------------------------------------


def _edit(doc: dict[str, Any], case: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    first = doc["patterns"][0] if doc["algorithm"] == "nesting" else doc["paths"][0]
    if case == "mean 1e308":
        first["root"]["latency_s"]["mean"] = 1e308
    elif case == "count 10**400":
        first["count"] = 10**400
    elif case == "id a list":
        first["id"] = [1, 2]
    elif case == "no latency_s":
        del first["root"]["latency_s"]
    elif case == "trace a string":
        doc["trace"] = "x"
    elif case == "params a list":
        doc["params"] = [1]
    elif case == "confidence a string":
        doc["stats"]["confidence"] = "high"
    elif case == "numbers as strings":
        first["root"]["latency_s"]["mean"] = "0.1"
    elif case == "quantum a string":
        doc["params"]["quantum_s"] = "x"
    elif case == "path count 10**400":
        first["count"] = 10**400
    elif case == "path nodes not names":
        first["nodes"] = [[1], 2]
    elif case == "path delays a number":
        first["delays_s"] = 1e308
    elif case == "path latency 1e308":
        first["latency_s"] = 1e308
    return doc


NESTING_CASES = [
    "mean 1e308",
    "count 10**400",
    "id a list",
    "no latency_s",
    "trace a string",
    "params a list",
    "confidence a string",
    "numbers as strings",
]
CONVOLUTION_CASES = [
    "quantum a string",
    "path count 10**400",
    "path nodes not names",
    "path delays a number",
    "path latency 1e308",
    "params a list",
]


def _argv(verb: str, paths: str, trace: Path, tmp_path: Path) -> list[str]:
    return {
        "viz draw": ["viz", "draw", paths, "--out", str(tmp_path / "o.svg")],
        "report": ["report", paths, "--out", str(tmp_path / "o.html")],
        "viz diff": ["viz", "diff", paths, paths, "--format", "dot", "--out", str(tmp_path / "o.dot")],
        "eval": ["eval", paths, str(trace)],
        "trend from-paths": ["trend", "from-paths", paths, "--store", str(tmp_path / "st"), "--build", "b"],
    }[verb]


VERBS = ["viz draw", "report", "viz diff", "eval", "trend from-paths"]


@pytest.mark.parametrize("verb", VERBS)
@pytest.mark.parametrize(
    ("algorithm", "case"),
    [("nesting", c) for c in NESTING_CASES] + [("convolution", c) for c in CONVOLUTION_CASES],
)
def test_a_hand_edited_paths_file_is_one_error(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    trace: Path,
    paths_files: dict[str, Path],
    verb: str,
    algorithm: str,
    case: str,
) -> None:
    doc = _edit(json.loads(paths_files[algorithm].read_text()), case)
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(doc))
    line = _one_error(capsys, main(_argv(verb, str(edited), trace, tmp_path)))
    assert str(edited) in line
    assert not [p.name for p in tmp_path.iterdir() if p.name != "edited.json"]


# --- item 17: call chains thousands of levels deep ---------------------------------------------


def _chain(levels: int) -> str:
    """A text trace of one call chain ``levels`` deep, A and B calling each other."""
    lines = [f"{k + 1} call {'AB'[k % 2]} {'BA'[k % 2]} {k + 1}" for k in range(levels)]
    lines += [
        f"{levels + 1 + j} return {'BA'[k % 2]} {'AB'[k % 2]} {k + 1}"
        for j, k in enumerate(reversed(range(levels)))
    ]
    return "\n".join(lines) + "\n"


def test_a_call_chain_3000_deep_is_inferred_drawn_and_reported(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = tmp_path / "deep.txt"
    text.write_text(_chain(3000))
    t, p = tmp_path / "deep.parquet", tmp_path / "p.json"
    assert main(["convert", str(text), str(t), "--quiet"]) == 0
    assert (
        main(["infer", "nesting", str(t), "--out", str(p), "--no-calibrate", "--show", "1", "--quiet"]) == 0
    )
    doc = read_paths(p)  # json.loads alone cannot go that deep
    depth, visit = 1, doc["patterns"][0]["root"]
    while visit["children"]:
        depth, visit = depth + 1, visit["children"][0]
    assert depth == 3000
    assert main(["viz", "draw", str(p), "--format", "dot", "--out", str(tmp_path / "p.dot")]) == 0
    assert main(["report", str(p), "--out", str(tmp_path / "r.html")]) == 0
    assert main(["viz", "diff", str(p), str(p), "--format", "dot", "--out", str(tmp_path / "d.dot")]) == 0
    # One request: its pattern is seen once (from-paths leaves out fewer than 5 by default).
    argv = ["trend", "from-paths", str(p), "--store", str(tmp_path / "st"), "--build", "b"]
    argv += ["--min-count", "1"]
    assert main(argv) == 0
    assert os.path.getsize(tmp_path / "p.dot") > 3000


# --- item 10: convolution's lags bounded --------------------------------------------------------


def test_a_quantum_far_below_the_max_lag_is_one_error(
    capsys: pytest.CaptureFixture[str], trace: Path, tmp_path: Path
) -> None:
    # 1 ns against 1 s: a billion lags, arrays of gigabytes until the kernel stepped in.
    out = tmp_path / "c.json"
    argv = ["infer", "convolution", str(trace), "--quantum", "1ns", "--max-lag", "1s", "--out", str(out)]
    line = _one_error(capsys, main(argv))
    assert "too many to correlate" in line
    assert "larger quantum or a shorter max_lag" in line
    assert not out.exists()


# --- item 19: timestamps at the ends of the int64 range --------------------------------------------


def test_merge_of_a_sorted_trace_spanning_the_int64_range_is_sorted(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    text = tmp_path / "wide.txt"
    text.write_text("-9223372036.854775807 call a b 1\n9223372036.854775807 return b a 1\n")
    wide, out = tmp_path / "wide.parquet", tmp_path / "m.parquet"
    assert main(["convert", str(text), str(wide), "--quiet"]) == 0
    # The difference of the two timestamps overflows int64: compared, they are in order.
    assert main(["merge", str(wide), "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err


_WIDE = [
    "-9223372036.854775807 call A B 1",
    "-9223372036.854775806 call B C 2",
    "-9223372036.854775805 return C B 2",
    "9223372036.854775805 return B A 1",
    "9223372036.854775806 call A B 3",
    "9223372036.854775807 return B A 3",
]


def test_convolution_counts_the_quanta_of_the_whole_int64_range(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The first and last instants a trace holds, in one trace: 18,446,744,074 quanta of
    1 s, not "spans only 0 quanta"."""
    text, out = tmp_path / "wide.txt", tmp_path / "c.json"
    text.write_text("\n".join(_WIDE) + "\n")
    assert main(["infer", "convolution", str(text), "--quantum", "1s", "--out", str(out)]) == 0
    assert "18,446,744,074 quanta of 1 s" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert (doc["trace"]["start"], doc["trace"]["end"]) == (
        "1677-09-21T00:12:43.145224193Z",
        "2262-04-11T23:47:16.854775807Z",
    )


def test_nesting_refuses_a_span_its_durations_cannot_hold(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Every duration nesting takes is a difference of two timestamps: over 292 years
    apart they wrap. One line, and no paths file with a negative latency."""
    text, out = tmp_path / "wide.txt", tmp_path / "p.json"
    text.write_text("\n".join(_WIDE) + "\n")
    line = _one_error(capsys, main(["infer", "nesting", str(text), "--out", str(out)]))
    assert "more than the 292 years" in line
    assert not out.exists()


@pytest.mark.parametrize("stamp", ["-9223372036.854775808", "1677-09-21T00:12:43.145224192Z"])
def test_the_nat_instant_is_refused_by_convert(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, stamp: str
) -> None:
    """INT64_MIN is the missing time (NaT) of numpy and pandas: a trace holding it would
    read as a message without a time there."""
    text, out = tmp_path / "nat.txt", tmp_path / "t.parquet"
    text.write_text(f"{stamp} call a b 1\n0 return b a 1\n")
    line = _one_error(capsys, main(["convert", str(text), str(out)]))
    assert f"nat.txt:1: invalid timestamp '{stamp}'" in line
    assert "from 1677-09-21T00:12:43.145224193Z" in line
    assert not out.exists()
