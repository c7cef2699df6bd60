"""Per-patch verdicts against jumpavg 0.4.2, and the CLI gating a CI job by its exit status."""

from __future__ import annotations

import json
from pathlib import Path

import jumpavg
import pytest

from tracefmt import ParameterError, ParseError
from trend import compare_runs, read_compare_file
from wirepath.cli import main

# The reference vectors live beside the repository (../shared), as in CI; else at /work/shared.
SHARED = Path(__file__).resolve().parents[3] / "shared"
if not SHARED.is_dir():
    SHARED = Path("/work/shared")
VECTORS = json.loads((SHARED / "data" / "trend" / "jumpavg_vectors.json").read_text())
ROWS = VECTORS["perpatch_console_vs_decision"]["rows"]
PERPATCH = [c for c in VECTORS["cases"] if c["name"].startswith(("perpatch", "version_divergent_perpatch"))]


@pytest.mark.parametrize("row", ROWS, ids=[f"drop{k}" for k in range(len(ROWS))])
def test_verdict_and_printed_bits_agree_with_the_decision(row):
    c = compare_runs(row["parent"], row["current"])
    decision = row["decision_classify_sbps12"]
    assert c.verdict == ("normal" if len(decision) == 1 else decision[1])
    # The bits we print are the ones the decision compares: the shorter grouping wins.
    total = jumpavg.classify([row["parent"], row["current"]]).bits
    assert min(c.separate_bits, c.combined_bits) == total
    assert (c.separate_bits <= c.combined_bits) == (c.verdict != "normal")


@pytest.mark.parametrize("case", PERPATCH, ids=[c["name"] for c in PERPATCH])
def test_perpatch_vectors(case):
    parent, current = case["values"]
    want = case["jumpavg_0.4.2"]["groups"]
    c = compare_runs(parent, current)
    assert c.verdict == ("normal" if len(want) == 1 else want[1]["comment"])
    if len(want) == 2:
        assert (c.parent_avg, c.current_avg) == (want[0]["avg"], want[1]["avg"])
        assert (c.parent_bits, c.current_bits) == (want[0]["bits"], want[1]["bits"])
    else:
        assert c.combined_bits == want[0]["bits"]


def test_latency_direction_and_failed_trial():
    assert (
        compare_runs([1.0, 1.01, 0.99], [1.5, 1.51, 1.49], direction="smaller-is-better").verdict
        == "regression"
    )
    failed = compare_runs([1.0, 1.0], [1.0, float("nan")])
    assert failed.verdict == "failed"
    assert failed.bad


def _files(tmp_path, parent, current):
    p, c = tmp_path / "parent.txt", tmp_path / "current.txt"
    p.write_text(parent)
    c.write_text(current)
    return ["--parent-file", str(p), "--current-file", str(c)]


def test_cli_console_output_and_exit_status(tmp_path, capsys):
    row = ROWS[-1]
    args = ["trend", "compare", "--parent", ",".join(map(str, row["parent"])), "--current"]
    assert main([*args, ",".join(map(str, row["current"]))]) == 1
    out = capsys.readouterr().out
    for text in (
        "test 0: test",
        "parent values (measured order):  10010000, 9980000, 10030000, 9970000, 10000000",
        "current values (sorted): 9462000, 9490500, 9500000, 9519000, 9538000",
        "difference of averages: -4.96 % of the parent average",
        "separate groups are shorter than the single group by",
        "verdict: regression",
    ):
        assert text in out
    assert main(["trend", "compare", "--parent", "10,10.1,9.9", "--current", "10,10.05,9.95"]) == 0


def test_cli_many_tests_from_files_indexed_from_zero(tmp_path, capsys):
    row = ROWS[-1]
    parent = f"same: 10, 10.1, 9.9\nslower: {', '.join(map(str, row['parent']))}\n"
    current = f"same: 10.05, 9.95, 10\nslower: {', '.join(map(str, row['current']))}\n"
    assert main(["trend", "compare", *_files(tmp_path, parent, current), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [t["verdict"] for t in doc["tests"]] == ["normal", "regression"]
    assert main(["trend", "compare", *_files(tmp_path, "a: 1, 1\n", "a: 1, fail\n")]) == 1
    assert "1 of 1 tests regressed or failed: 0 (a)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--parent", "1,2"], "--parent and --current go together"),
        (["--parent", "1,x", "--current", "1"], "'x' is not a number"),
        (["--parent", "1,-2", "--current", "1"], "must be a finite number >= 0"),
        ([], "give --parent and --current, or --parent-file and --current-file"),
    ],
    ids=["half", "text", "negative", "nothing"],
)
def test_cli_bad_values(argv, message, capsys):
    assert main(["trend", "compare", *argv]) == 3  # an error: no verdict
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err


def test_cli_files_with_other_tests(tmp_path, capsys):
    assert main(["trend", "compare", *_files(tmp_path, "a: 1\nb: 2\n", "a: 1\nc: 2\n")]) == 3
    assert "only in one file: b, c" in capsys.readouterr().err


def test_compare_file_errors(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("a: 1\na: 2\n")
    with pytest.raises(ParseError, match="given twice"):
        read_compare_file(p)
    p.write_text("just numbers 1 2 3\n")
    with pytest.raises(ParseError, match=r"expected 'test: v1, v2, \.\.\.'"):
        read_compare_file(p)
    with pytest.raises(ParameterError, match="need trial values"):
        compare_runs([], [1.0])


@pytest.mark.parametrize("row", ROWS, ids=[f"drop{k}" for k in range(len(ROWS))])
def test_unit_one_reproduces_the_bits_csit_prints(row):
    """CSIT's console counts bits with unit 1.0; asked for that unit, we print the same."""
    c = compare_runs(row["parent"], row["current"], unit=1.0)
    assert c.separate_bits - c.combined_bits == pytest.approx(
        row["printed_bits_diff_sep_minus_comb_unit1"], rel=1e-9
    )
    assert c.unit == 1.0


def test_cli_unit_and_sbps(capsys):
    row = ROWS[-2]
    args = ["trend", "compare", "--parent", ",".join(map(str, row["parent"])), "--current"]
    args.append(",".join(map(str, row["current"])))
    assert main([*args, "--unit", "1", "--json"]) == 0  # one group at unit 1 (CSIT's console view)
    assert json.loads(capsys.readouterr().out)["tests"][0]["verdict"] == "normal"
    assert main([*args, "--sbps", "12", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["tests"][0]["verdict"] == "regression"
