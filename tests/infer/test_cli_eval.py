"""`wirepath eval`: the accuracy report against ground truth, and its bad inputs."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import synth
from tracefmt import write_trace
from wirepath.cli import main

MULTITIER = Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("eval")
    config = replace(synth.load_config(MULTITIER), messages=6000, parallelism=1.0, seed=5)
    synth.generate_trace(config, d / "t.parquet", truth_path=d / "truth.json")
    assert (
        main(
            [
                "infer",
                "nesting",
                str(d / "t.parquet"),
                "--out",
                str(d / "p.json"),
                "--instances",
                str(d / "i.parquet"),
            ]
        )
        == 0
    )
    return {
        "dir": d,
        "trace": d / "t.parquet",
        "paths": d / "p.json",
        "inst": d / "i.parquet",
        "truth": d / "truth.json",
    }


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: "), err
    return err[0]


def test_report_follows_the_contract(run, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert (
        main(["eval", str(run["paths"]), str(run["trace"]), "--instances", str(run["inst"]), "--json"]) == 0
    )
    report = json.loads(capsys.readouterr().out)
    truth = json.loads(run["truth"].read_text())
    assert set(report) >= {"patterns", "instances", "messages", "top_n", "delay_error"}
    assert report["patterns"]["true"] == len(truth["patterns"])
    assert report["instances"]["true"] == truth["instances"]
    assert report["messages"]["true"] == truth["messages"]
    for row in report["top_n"]:
        assert set(row) == {"n", "missing", "missing_rate", "tolerance"}
        assert row["missing_rate"] == row["missing"] / row["n"]
    # At parallelism 1 with ids, nesting is exact: nothing missed, nothing invented.
    assert report["patterns"]["false_negatives"] == report["patterns"]["false_positives"] == 0
    assert report["instances"]["false_negatives"] == report["instances"]["false_positives"] == 0
    assert report["delay_error"]["median_rel"] == pytest.approx(0.0, abs=1e-9)


def test_without_instances_the_instance_scores_are_null(run, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["eval", str(run["paths"]), str(run["trace"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["instances"]["inferred"] is None
    assert report["messages"]["false_negatives"] is None


def test_trace_without_truth(run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plain = tmp_path / "plain.parquet"
    table = pq.read_table(run["trace"])
    write_trace(table.select(["timestamp", "sender", "receiver", "op", "id"]), plain)
    capsys.readouterr()
    assert main(["eval", str(run["paths"]), str(plain)]) == 1
    assert "has no ground truth" in _error(capsys)


def test_paths_file_not_json(run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.json"
    bad.write_text("{not json", encoding="utf-8")
    assert main(["eval", str(bad), str(run["trace"])]) == 1
    assert "not JSON, so not a paths file" in _error(capsys)


def test_json_that_is_not_a_paths_file(run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"format": "something/1"}', encoding="utf-8")
    assert main(["eval", str(bad), str(run["trace"])]) == 1
    assert "not a paths file" in _error(capsys)


def test_missing_paths_file(run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", str(tmp_path / "nope.json"), str(run["trace"])]) == 1
    assert "no such file" in _error(capsys)


def test_instances_file_of_another_kind(run, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), other)
    assert main(["eval", str(run["paths"]), str(run["trace"]), "--instances", str(other)]) == 1
    assert "not an instances table" in _error(capsys)
