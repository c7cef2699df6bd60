"""``wirepath infer nesting``, run in-process: exit codes, files written, output printed."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

import infer
import synth
import tracefmt
from tracefmt.patterns import Shape, pattern_id
from wirepath.cli import main

STAT_KEYS = {"mean", "p50", "p90", "p99", "std"}


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="session")
def synth_files(tmp_path_factory: pytest.TempPathFactory, serial_toml: str) -> dict[str, Any]:
    """A Parquet trace written by synth, with its truth file."""
    d = tmp_path_factory.mktemp("cli_infer")
    text = serial_toml.replace("messages = 20000", "messages = 8000")
    trace, truth = d / "t.parquet", d / "truth.json"
    synth.generate_trace(synth.parse_config(text), trace, truth_path=truth)
    table = pq.read_table(trace)
    return {
        "trace": trace,
        "truth": json.loads(truth.read_text()),
        "calls": sum(op == "call" for op in table["op"].to_pylist()),
        "messages": table.num_rows,
    }


def check_tree(v: dict[str, Any], root: bool) -> None:
    assert set(v) >= {"node", "caller", "latency_s", "delay_s", "children"}
    assert set(v["latency_s"]) >= STAT_KEYS
    if root:
        assert v["delay_s"] is None
    else:
        assert set(v["delay_s"]) >= STAT_KEYS
    for c in v["children"]:
        check_tree(c, False)


def preorder(v: dict[str, Any], depth: int = 0) -> list[tuple[int, dict[str, Any]]]:
    out = [(depth, v)]
    for c in v["children"]:
        out += preorder(c, depth + 1)
    return out


def test_infer_nesting_writes_the_paths_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json, inst = tmp_path / "paths.json", tmp_path / "inst.parquet"
    rc, out, err = run(
        capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--instances", inst
    )
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["format"] == "wirepath.paths/1"
    assert doc["algorithm"] == "nesting"
    assert isinstance(doc["params"], dict)
    assert doc["trace"]["messages"] == synth_files["messages"]
    assert isinstance(doc["trace"]["start"], str)
    assert isinstance(doc["trace"]["end"], str)
    assert doc["stats"]["call_pairs"] == synth_files["calls"]
    assert doc["stats"]["unmatched_calls"] == 0
    assert doc["stats"]["unmatched_returns"] == 0
    assert doc["stats"]["mean_parallelism"] == pytest.approx(1.0)
    truth = synth_files["truth"]
    assert {p["id"]: p["count"] for p in doc["patterns"]} == {p["id"]: p["count"] for p in truth["patterns"]}
    for p in doc["patterns"]:
        check_tree(p["root"], True)
    totals = [p["total_latency_s"] for p in doc["patterns"]]
    assert totals == sorted(totals, reverse=True)
    # Instances: one row per call pair.
    t = pq.read_table(inst)
    assert t.num_rows == synth_files["calls"]
    assert t["parent"].null_count == sum(p["count"] for p in truth["patterns"])

    # The summary and the tree of the first pattern.
    lines = out.splitlines()
    first = doc["patterns"][0]
    head = next(k for k, line in enumerate(lines) if line.startswith("#1 "))
    assert first["id"] in lines[head]
    visits = preorder(first["root"])
    tree = lines[head + 1 : head + 1 + len(visits)]
    indent = [len(line) - len(line.lstrip(" ")) for line in tree]
    for line, (_, v) in zip(tree, visits, strict=True):
        assert line.strip().startswith(f"{v['caller']} -> {v['node']}"), line
    for (d1, _), (d2, _), i1, i2 in zip(visits, visits[1:], indent, indent[1:], strict=False):
        assert (i2 > i1) == (d2 > d1)
    assert str(out_json) in out


def test_sort_count_and_top(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    rc, _, err = run(capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--sort", "count")
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    counts = [p["count"] for p in doc["patterns"]]
    assert counts == sorted(counts, reverse=True)
    assert len(counts) == len(synth_files["truth"]["patterns"])
    true_counts = sorted((p["count"] for p in synth_files["truth"]["patterns"]), reverse=True)
    assert counts == true_counts

    rc, _, err = run(
        capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--sort", "count", "--top", "2"
    )
    assert rc == 0, err
    top = json.loads(out_json.read_text())
    assert [p["id"] for p in top["patterns"]] == [p["id"] for p in doc["patterns"][:2]]
    assert top["params"]["top"] == 2


def test_options_reach_the_params(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    rc, _, err = run(
        capsys,
        "infer",
        "nesting",
        synth_files["trace"],
        "--out",
        out_json,
        "--overlap-penalty",
        "0",
        "--same-node-penalty",
        "0.5",
        "--tolerance",
        "2ms",
        "--bin-min",
        "10us",
        "--bin-base",
        "1.1",
        "--min-count",
        "3",
    )
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    p = doc["params"]
    assert p["overlap_penalty"] == 0.0
    assert p["same_node_penalty"] == 0.5
    assert p["tolerance_s"] == pytest.approx(0.002)
    assert p["bin_min_s"] == pytest.approx(1e-5)
    assert p["bin_base"] == 1.1
    assert p["min_count"] == 3
    assert all(pat["count"] >= 3 for pat in doc["patterns"])
    assert any(pat["count"] < 3 for pat in synth_files["truth"]["patterns"])


def test_json_on_stdout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    rc, out, err = run(capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--json")
    assert rc == 0, err
    assert json.loads(out) == json.loads(out_json.read_text())


TEXT = """\
# three requests with a database call, one without; ids partly missing
1.000 call client web 1
1.001 call web db -
1.004 return db web -
1.005 return web client 1
2.000 call client web 2
2.001 call web db 3
2.004 return db web 3
2.006 return web client 2
3.000 call client web -
3.001 call web db -
3.005 return db web -
3.006 return web client -
4.000 call client web 9
4.002 return web client 9
4.500 send web log -
"""


def test_text_trace_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out_json = tmp_path / "t.txt", tmp_path / "p.json"
    src.write_text(TEXT)
    rc, out, err = run(capsys, "infer", "nesting", src, "--out", out_json)
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    with_db = Shape("client", "web", (Shape("web", "db"),))
    alone = Shape("client", "web")
    assert {p["id"]: p["count"] for p in doc["patterns"]} == {pattern_id(with_db): 3, pattern_id(alone): 1}
    assert doc["trace"]["messages"] == 15
    assert doc["stats"]["call_pairs"] == 7
    assert doc["stats"]["sends_ignored"] == 1
    first = doc["patterns"][0]
    assert first["id"] == pattern_id(with_db)  # total 0.005 + 0.006 + 0.006 s against 0.002 s
    assert first["total_latency_s"] == pytest.approx(0.017, rel=1e-9)
    assert first["root"]["latency_s"]["mean"] == pytest.approx(0.017 / 3, rel=1e-9)
    db = first["root"]["children"][0]
    assert db["latency_s"]["mean"] == pytest.approx((0.003 + 0.003 + 0.004) / 3, rel=1e-9)
    assert db["delay_s"]["mean"] == pytest.approx(0.001, rel=1e-9)
    assert "client -> web" in out


def test_no_ids_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Two overlapping calls answered in reverse order: ids say 3 ms and 1 ms, FIFO 2 and 2.
    src, out_json = tmp_path / "t.txt", tmp_path / "p.json"
    src.write_text(
        "0.001 call a b 1\n0.002 call a b 2\n0.003 return b a 2\n0.004 return b a 1\n"
        "0.010 call a c 5\n0.011 call c d 6\n0.012 return d c 6\n0.013 return c a 5\n"
    )
    ab = pattern_id(Shape("a", "b"))

    def latency() -> dict[str, float]:
        doc = json.loads(out_json.read_text())
        return next(p for p in doc["patterns"] if p["id"] == ab)["root"]["latency_s"]

    rc, _, err = run(capsys, "infer", "nesting", src, "--out", out_json)
    assert rc == 0, err
    assert latency()["std"] == pytest.approx(0.001, rel=1e-9)
    rc, _, err = run(capsys, "infer", "nesting", src, "--out", out_json, "--no-use-ids")
    assert rc == 0, err
    assert latency()["std"] == pytest.approx(0.0, abs=1e-12)
    assert latency()["mean"] == pytest.approx(0.002, rel=1e-9)


def test_trace_without_rpcs_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out_json = tmp_path / "t.txt", tmp_path / "p.json"
    src.write_text("1.0 send a b -\n2.0 send b c -\n")
    rc, out, err = run(capsys, "infer", "nesting", src, "--out", out_json)
    assert rc == 1
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "convolution" in lines[0]
    assert out == ""
    assert not out_json.exists()


def test_missing_trace_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "infer", "nesting", tmp_path / "nope.parquet", "--out", tmp_path / "p.json")
    assert rc == 1
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")


@pytest.mark.parametrize(
    "extra",
    [["--bogus"], ["--sort", "latency"], ["--board", "nope"], ["--top", "two"]],
    ids=["unknown-flag", "bad-sort", "bad-board", "bad-top"],
)
def test_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any], extra: list[str]
) -> None:
    out_json = tmp_path / "p.json"
    rc, _, err = run(capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, *extra)
    assert rc == 2
    assert "usage" in err.lower()
    assert not out_json.exists()


def test_missing_out_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    rc, _, err = run(capsys, "infer", "nesting", synth_files["trace"])
    assert rc == 2
    assert "--out" in err


def test_bad_parameter_value_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    rc, _, err = run(capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--bin-base", "1")
    assert rc == 1
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "bin_base" in lines[0]
    assert not out_json.exists()


def test_instances_file_parents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json, inst = tmp_path / "p.json", tmp_path / "i.parquet"
    rc, _, err = run(capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--instances", inst)
    assert rc == 0, err
    trace = pq.read_table(synth_files["trace"])
    t = pq.read_table(inst)
    call = np.array(trace["true_call"].to_pylist())
    true_parent = trace["true_parent"].to_pylist()
    rows = np.array(t["call_row"].to_pylist())
    parent = t["parent"].to_pylist()
    for k, row in enumerate(rows.tolist()):
        expect = true_parent[row]
        got = None if parent[k] is None else int(call[rows[parent[k]]])
        assert got == expect


def test_chain_rounds_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    argv = ["infer", "nesting", synth_files["trace"], "--out", out_json, "--board", "joint", "--density"]
    rc, _, err = run(capsys, *argv, "--chains", "2")
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    assert doc["params"]["chains"] == 2
    assert 1 <= doc["stats"]["chain_rounds_run"] <= 2
    rc, _, err = run(capsys, *argv, "--chains", "-1")
    assert rc != 0
    assert "chains must be an integer from 0 to 100" in err


# --- presets and single settings ------------------------------------------------------------


@pytest.fixture(scope="session")
def parallel_file(tmp_path_factory: pytest.TempPathFactory, parallel_trace) -> Path:
    """The parallel synth trace (about 4 candidate parents per call) as Parquet."""
    path = tmp_path_factory.mktemp("cli_presets") / "parallel.parquet"
    tracefmt.write_trace(parallel_trace[0], path)
    return path


def test_preset_paper_gives_the_papers_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], parallel_file: Path
) -> None:
    out_json = tmp_path / "p.json"
    rc, _, err = run(capsys, "infer", "nesting", parallel_file, "--out", out_json, "--preset", "paper")
    assert rc == 0, err
    assert err == ""
    doc = json.loads(out_json.read_text())
    table = tracefmt.read_trace(parallel_file)
    assert doc == json.loads(json.dumps(infer.infer_nesting(table, "paper").to_json()))
    assert doc["params"]["preset"] == "paper"
    # The default's answer differs here, so the flag was heard.
    default = json.loads(json.dumps(infer.infer_nesting(table).to_json()))
    assert [(p["id"], p["count"]) for p in doc["patterns"]] != [
        (p["id"], p["count"]) for p in default["patterns"]
    ]


@pytest.mark.parametrize(
    ("flags", "preset", "overrides", "recorded"),
    [
        (["--preset", "paper", "--chains", "3"], "paper", {"chains": 3}, None),
        (["--no-density"], "accurate", {"density": False}, None),
        (
            ["--preset", "paper", "--density", "--board", "joint"],
            "paper",
            {"density": True, "board": "joint"},
            None,
        ),
        (
            ["--preset", "fast", "--rounds", "1", "--siblings", "0"],
            "fast",
            {"rounds": 1, "siblings": 0},
            None,
        ),
        (["--chains", "2"], "accurate", {"chains": 2}, "fast"),  # lands on another preset
    ],
    ids=["paper-chains", "no-density", "paper-density-joint", "fast-rounds", "accurate-two-chains"],
)
def test_single_flags_override_the_preset(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    parallel_file: Path,
    flags: list[str],
    preset: str,
    overrides: dict[str, Any],
    recorded: str | None,
) -> None:
    out_json = tmp_path / "p.json"
    rc, _, err = run(capsys, "infer", "nesting", parallel_file, "--out", out_json, *flags)
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    params = infer.NestingParams.preset(preset, **overrides)
    expected = {**params.to_json(), "preset": recorded, "top": None, "min_count": 1, "sort": "total"}
    assert doc["params"] == expected
    table = tracefmt.read_trace(parallel_file)
    assert doc["patterns"] == json.loads(json.dumps(infer.infer_nesting(table, params).to_json()))["patterns"]
    stages = doc["stats"]["stages"]
    assert sum(s["stage"] == "chain round" for s in stages) == doc["stats"].get("chain_rounds_run", 0)
    assert doc["stats"].get("chain_rounds_run", 0) <= params.chains


def test_setting_that_does_nothing_is_warned_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    flags = ["--rounds", "3", "--overlap-penalty", "0", "--same-node-penalty", "0", "--children-penalty", "0"]
    rc, out, err = run(capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, *flags)
    assert rc == 0, err
    assert err.splitlines() == ["warning: rounds=3 does nothing without a penalty (a penalty weight > 0)"]
    assert str(out_json) in out
    doc = json.loads(out_json.read_text())
    assert doc["params"]["rounds"] == 3
    assert "penalty round" not in [s["stage"] for s in doc["stats"]["stages"]]


def test_unknown_preset_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], synth_files: dict[str, Any]
) -> None:
    out_json = tmp_path / "p.json"
    rc, out, err = run(
        capsys, "infer", "nesting", synth_files["trace"], "--out", out_json, "--preset", "bogus"
    )
    assert rc == 2
    assert out == ""
    assert "usage: wirepath infer nesting" in err
    assert "'bogus'" in err
    for name in infer.PRESETS:
        assert name in err.splitlines()[-1]
    assert not out_json.exists()


def test_help_describes_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "infer", "nesting", "--help")
    assert rc == 0
    assert "--preset {accurate,fast,paper,requests}" in out
    text = " ".join(out.split())
    assert "default accurate" in text
    assert "--preset fast stops after two chain rounds" in text
    assert "--preset paper is the 2003 scoreboard" in text
    assert "--preset requests adds up to three request rounds" in text
    assert "Single options override the preset's value" in text


# --- the printed tree -------------------------------------------------------------------------


def test_tree_marks_the_calls_made_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], h) -> None:
    ms = h.MS
    rows = [
        # B calls C and D at once (D calls F), then E and G at once, then H alone.
        (0, "call", "A", "B", 1),
        (1 * ms, "call", "B", "C", 2),
        (2 * ms, "call", "B", "D", 3),
        (3 * ms, "call", "D", "F", 4),
        (4 * ms, "return", "F", "D", 4),
        (5 * ms, "return", "C", "B", 2),
        (6 * ms, "return", "D", "B", 3),
        (7 * ms, "call", "B", "E", 5),
        (7 * ms + ms // 2, "call", "B", "G", 6),
        (8 * ms, "return", "E", "B", 5),
        (9 * ms, "return", "G", "B", 6),
        (10 * ms, "call", "B", "H", 7),
        (11 * ms, "return", "H", "B", 7),
        (12 * ms, "return", "B", "A", 1),
        # B calls C, then D once C has returned: no mark.
        (100 * ms, "call", "A", "B", 11),
        (101 * ms, "call", "B", "C", 12),
        (102 * ms, "return", "C", "B", 12),
        (103 * ms, "call", "B", "D", 13),
        (104 * ms, "return", "D", "B", 13),
        (105 * ms, "return", "B", "A", 11),
    ]
    trace, out_json = tmp_path / "t.parquet", tmp_path / "p.json"
    tracefmt.write_trace(h.trace(rows), trace)
    rc, out, err = run(capsys, "infer", "nesting", trace, "--out", out_json)
    assert rc == 0, err
    doc = json.loads(out_json.read_text())
    fan = Shape(
        "A",
        "B",
        (
            Shape("B", "C"),
            Shape("B", "D", (Shape("D", "F"),)),
            Shape("B", "E"),
            Shape("B", "G"),
            Shape("B", "H"),
        ),
        (0, 0, 1, 1, 2),
    )
    serial = Shape("A", "B", (Shape("B", "C"), Shape("B", "D")))
    assert [p["id"] for p in doc["patterns"]] == [pattern_id(fan), pattern_id(serial)]
    # Each line up to its numbers: the marks, the indent and the call.
    lines = [re.sub(r"  [-+]?\d.*$", "", line) for line in out.splitlines()]
    first = next(k for k, line in enumerate(lines) if line.startswith("#1 "))
    second = next(k for k, line in enumerate(lines) if line.startswith("#2 "))
    assert lines[first + 1 : second] == [
        "  A -> B",
        "    (at once)",
        "    | B -> C",
        "    | B -> D",
        "    |   D -> F",
        "    (at once)",
        "    | B -> E",
        "    | B -> G",
        "    B -> H",
    ]
    assert lines[second + 1 :] == ["  A -> B", "    B -> C", "    B -> D"]


@pytest.mark.parametrize("which", ["out", "instances", "both"])
def test_infer_nesting_never_writes_over_its_input_or_itself(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, which: str
) -> None:
    # An output named like the trace would destroy it; two outputs named alike would lose
    # one. One line, exit 1, the trace untouched, nothing written.
    trace = tmp_path / "t.txt"
    trace.write_text("0.001 call c s 1\n0.002 return s c 1\n")
    before = trace.read_bytes()
    args = {
        "out": ["--out", trace],
        "instances": ["--out", tmp_path / "p.json", "--instances", trace],
        "both": ["--out", tmp_path / "x.json", "--instances", tmp_path / "x.json"],
    }[which]
    rc, _, err = run(capsys, "infer", "nesting", trace, *args)
    assert rc == 1
    if which == "both":
        expected = f"error: {tmp_path / 'x.json'}: given for two outputs; choose another name for one"
    else:
        expected = f"error: {args[-1]}: output would overwrite the input; choose another name"
    assert err.strip().splitlines() == [expected]
    assert trace.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.txt"]
