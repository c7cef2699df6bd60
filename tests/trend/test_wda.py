"""Mako's window deviation analyzer on the cases of its own unit tests."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from tracefmt import ParameterError, ParseError
from trend import analyze_wda, load_wda_config, read_wda_runs
from wirepath.cli import main

# The reference vectors live beside the repository (../shared), as in CI; else at /work/shared.
SHARED = Path(__file__).resolve().parents[3] / "shared"
if not SHARED.is_dir():
    SHARED = Path("/work/shared")
VECTORS = SHARED / "data" / "trend" / "wda_vectors.json"
CASES = json.loads(VECTORS.read_text())["cases"]


def _metric(check: dict) -> str:
    return check["value_key"] or check["data_type"].lower()


def _write_case(case: dict, tmp_path: Path) -> tuple[Path, Path]:
    """The case as the CLI takes it: CHECKS.json (Mako's field names) and RUNS.csv."""
    queries = [{"run_order": o} for o in re.findall(r"run_order: (\w+)", case["ctor_in_textproto"])]
    checks = [
        {
            "data_filter": {
                "value_key": _metric(t),
                "ignore_missing_data": t["ignore_missing_data"],
            },
            "recent_window_size": t["recent_window_size"],
            "minimum_historical_window_size": t["minimum_historical_window_size"],
            "direction_bias": t["direction_bias"],
            "mean_tolerance_params_list": t["mean_tolerance_params_list"],
            "median_tolerance_params_list": t["median_tolerance_params_list"],
        }
        for t in case["tolerance_checks"]
    ]
    config = tmp_path / "checks.json"
    config.write_text(json.dumps({"run_info_query_list": queries, "tolerance_check_list": checks}))
    runs = tmp_path / "runs.csv"
    series = case["series_per_check_sorted_current_last"]
    with runs.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run_key", "timestamp_ms", "build_id", "metric", "value"])
        for k, first in enumerate(series[0]):
            written = set()
            for check, points in zip(case["tolerance_checks"], series, strict=True):
                point, metric = points[k], _metric(check)
                if metric in written:
                    continue
                written.add(metric)
                value = "" if point["value"] is None else str(point["value"]).lower()
                ts, build = first.get("timestamp_ms", ""), first.get("build_id", "")
                w.writerow([first["run_key"], ts, build, metric, value])
    return config, runs


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_every_mako_case(case, tmp_path):
    config, runs = _write_case(case, tmp_path)
    result = analyze_wda(load_wda_config(config), read_wda_runs(runs))
    expected, ref = case["expected"], case["python_reference"]
    assert result.status == expected["status"]
    assert result.regression == expected["regression"]
    assert expected["output_message_contains"] in result.message
    if expected["checks_skipped"] is not None:
        assert result.checks_skipped == expected["checks_skipped"]
    for ours, theirs in zip(result.checks, ref.get("checks") or [], strict=True):
        assert ours["result"] == theirs["result"]
        if theirs["result"] == "SKIPPED":
            continue
        assert ours["stats"] == pytest.approx(theirs["stats"], rel=1e-12)
        assert len(ours["params"]) == len(theirs["params"])
        for mine, want in zip(ours["params"], theirs["params"], strict=True):
            assert (mine["kind"], mine["is_regressed"]) == (want["kind"], want["is_regressed"])
            assert (mine["tolerance"], mine["delta"]) == pytest.approx(
                (want["tolerance"], want["delta"]), rel=1e-12
            )
        assert ours["historic_window"] == theirs["historic_window"]
    if ref.get("checks") is None:
        assert result.checks == ()


@pytest.mark.parametrize(
    ("name", "code"), [("mean-basic", 0), ("mean-multi-param-all-fail", 1), ("mean-missing-data", 3)]
)
def test_cli_json_and_exit_status(name, code, tmp_path, capsys):
    case = next(c for c in CASES if c["name"] == name)
    config, runs = _write_case(case, tmp_path)
    assert main(["trend", "wda", "--config", str(config), str(runs), "--json"]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["status"] == case["expected"]["status"]
    assert doc["regression"] == case["expected"]["regression"]
    assert set(doc) >= {"status", "regression", "checks"}


def test_cli_text_names_the_verdict(tmp_path, capsys):
    case = next(c for c in CASES if c["name"] == "mean-multi-param-all-fail")
    config, runs = _write_case(case, tmp_path)
    assert main(["trend", "wda", "--config", str(config), str(runs)]) == 1
    out = capsys.readouterr().out
    assert "REGRESSED" in out
    assert "Found 1 regressed checks" in out


def test_nan_value_is_data_and_empty_value_is_missing(tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text("run_key,timestamp_ms,build_id,metric,value\nh1,1,,y,nan\nh2,2,,y,\n")
    first, second = read_wda_runs(p)
    assert first.values["y"] != first.values["y"]  # NaN
    assert second.values == {"y": None}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("run_key,timestamp_ms,metric,value\nh1,1,y,2\n", "missing column 'build_id'"),
        ("run_key,timestamp_ms,build_id,metric,value\nh1,1,,y,fast\n", "value 'fast' is not a number"),
        ("run_key,timestamp_ms,build_id,metric,value\n", "no runs"),
    ],
    ids=["empty", "missing-column", "non-numeric", "no-rows"],
)
def test_bad_runs_file(text, message, tmp_path):
    p = tmp_path / "runs.csv"
    p.write_text(text)
    with pytest.raises(ParseError, match=message):
        read_wda_runs(p)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "tolerance_check_list"),
        ({"tolerance_check_list": [{"data_filter": {}}]}, "needs a value_key"),
        ({"tolerance_check_list": [{"data_filter": {"value_key": "y"}, "direction_bias": "UP"}]}, "NO_BIAS"),
        (
            {"tolerance_check_list": [{"data_filter": {"value_key": "y"}, "recent_window_size": 0}]},
            "positive",
        ),
        ({"run_order": "DATE", "tolerance_check_list": []}, "TIMESTAMP, BUILD_ID"),
        (
            {"tolerance_check_list": [{"data_filter": {"value_key": "y"}, "window": 3}]},
            "unknown field 'window'",
        ),
    ],
    ids=["no-checks", "no-key", "bias", "window", "order", "unknown-field"],
)
def test_bad_config(config, message):
    with pytest.raises(ParameterError, match=message):
        load_wda_config(config)


def test_bad_config_file_through_cli(tmp_path, capsys):
    bad = tmp_path / "checks.json"
    bad.write_text("{not json")
    runs = tmp_path / "runs.csv"
    runs.write_text("run_key,timestamp_ms,build_id,metric,value\nh1,1,,y,1\n")
    assert main(["trend", "wda", "--config", str(bad), str(runs)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert "not JSON" in err


def test_build_order_needs_build_ids():
    from trend import WdaRun

    runs = [WdaRun("a", 1.0, None, {"y": 1.0}), WdaRun("b", 2.0, 7.0, {"y": 1.0})]
    cfg = {"run_order": "BUILD_ID", "tolerance_check_list": [{"data_filter": {"value_key": "y"}}]}
    with pytest.raises(ParameterError, match="run 'a' has no build_id, which run_order BUILD_ID needs"):
        analyze_wda(cfg, runs)
