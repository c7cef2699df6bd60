"""Hostile input to the trend verbs: each case of the probe, fed as it was, with the exit
status and the one ``error: ...`` line (or the corrected output) it must give.

Exit statuses of the gating verbs (check, compare, wda): 0 no regression, 1 a regression
or a failed trial/run, 2 a usage error, 3 no verdict (an error, or Mako's FAIL status).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tracefmt import ParameterError, ParseError, Store
from trend import (
    Series,
    WdaRun,
    analyze_series,
    analyze_wda,
    check_number,
    classify_mdl,
    classify_tmm,
    finite_json,
    load_series,
    parse_time_ns,
    read_compare_file,
    read_result_rows,
    read_wda_runs,
    resolve_unit,
    results_table,
    trial_windows,
    write_results,
)
from wirepath.cli import main

WDA_HEADER = "run_key,timestamp_ms,build_id,metric,value\n"
MEDIAN_CHECK = {
    "tolerance_check_list": [
        {"data_filter": {"value_key": "y"}, "median_tolerance_params_list": [{"median_coeff": 0.05}]}
    ]
}
BOM = b"\xef\xbb\xbf"


#: A paths file of one pattern: one visit to A from c, 0.5 s.
_ONE_PATTERN = {
    "format": "wirepath.paths/1",
    "algorithm": "nesting",
    "patterns": [
        {
            "id": "x",
            "count": 1,
            "total_latency_s": 0.5,
            "root": {"node": "A", "caller": "c", "latency_s": {"mean": 0.5}, "children": []},
        }
    ],
}


def _strict_json(text: str) -> object:
    """Parse JSON as other tools do: NaN, Infinity and -Infinity are not JSON."""

    def refuse(token: str) -> None:
        raise AssertionError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


def _one_error(capsys: pytest.CaptureFixture[str], message: str) -> str:
    """The single ``error: ...`` line on stderr, checked to hold ``message``."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert message in lines[0]
    return lines[0]


def _usage_error(capsys: pytest.CaptureFixture[str], message: str) -> None:
    err = capsys.readouterr().err
    assert err.startswith("usage: ")
    assert message in err


def _wda_files(tmp_path: Path, current: str, config: dict | None = None) -> list[str]:
    runs = tmp_path / "runs.csv"
    history = "".join(f"h{k},{k},,y,{10 + k % 2}\n" for k in range(5))
    runs.write_text(WDA_HEADER + history + f"r,9,,y,{current}\n")
    cfg = tmp_path / "checks.json"
    cfg.write_text(json.dumps(config or MEDIAN_CHECK))
    return ["trend", "wda", "--config", str(cfg), str(runs)]


# 1. wda: a non-finite current run never passes; JSON never holds NaN or Infinity ------------


@pytest.mark.parametrize("current", ["inf", "1e400", "-inf"])
def test_wda_refuses_an_infinite_current_run(current, tmp_path, capsys):
    assert main(_wda_files(tmp_path, current)) == 3
    _one_error(capsys, f"runs.csv:7: value {current!r} must be a finite number, not ")


def test_wda_counts_a_nan_current_run_as_failed(tmp_path, capsys):
    argv = _wda_files(tmp_path, "nan")
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert out.startswith("SUCCESS: Found 1 regressed checks")
    assert "median: |delta| NaN (a failed recent run) vs tolerance 0.5: regressed" in out
    assert main([*argv, "--json"]) == 1
    doc = _strict_json(capsys.readouterr().out)
    (check,) = doc["checks"]
    assert check["result"] == "REGRESSED"
    assert check["params"][0]["delta"] is None


@pytest.mark.parametrize("bias", ["IGNORE_INCREASE", "IGNORE_DECREASE", "NO_BIAS"])
def test_wda_nan_regresses_whatever_the_bias(bias):
    runs = [WdaRun(f"h{k}", float(k), None, {"y": 10.0}) for k in range(4)]
    runs.append(WdaRun("r", 9.0, None, {"y": math.nan}))
    cfg = {"tolerance_check_list": [{**MEDIAN_CHECK["tolerance_check_list"][0], "direction_bias": bias}]}
    result = analyze_wda(cfg, runs)
    assert (result.status, result.regression) == ("SUCCESS", True)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"mean_tolerance_params_list": [{"mean_coeff": 0.05}]}, "Tolerance must be nonnegative. Got: nan"),
        ({"median_tolerance_params_list": [{"median_coeff": 2}]}, "Tolerance must be finite. Got: inf"),
    ],
    ids=["mean-overflows", "tolerance-overflows"],
)
def test_wda_overflowing_statistics_fail_and_stay_json(params, message, tmp_path, capsys):
    config = {"tolerance_check_list": [{"data_filter": {"value_key": "y"}, **params}]}
    argv = _wda_files(tmp_path, "1", config)
    Path(argv[-1]).write_text(WDA_HEADER + "".join(f"h{k},{k},,y,1e308\n" for k in range(5)))
    assert main([*argv, "--json"]) == 3  # Mako's FAIL: no verdict
    doc = _strict_json(capsys.readouterr().out)
    assert (doc["status"], doc["message"]) == ("FAIL", message)


def test_wda_json_writes_overflowed_statistics_as_null(tmp_path, capsys):
    argv = _wda_files(tmp_path, "1")
    Path(argv[-1]).write_text(WDA_HEADER + "".join(f"h{k},{k},,y,1e308\n" for k in range(5)) + "r,9,,y,1\n")
    assert main([*argv, "--json"]) == 1  # the median check still decides: a drop to 1
    (check,) = _strict_json(capsys.readouterr().out)["checks"]
    assert check["stats"]["historic_mean"] is None  # inf: five times 1e308 overflows
    assert check["stats"]["historic_median"] == 1e308


def test_wda_refuses_infinite_values_from_python():
    runs = [WdaRun(f"h{k}", float(k), None, {"y": 10.0}) for k in range(4)]
    runs.append(WdaRun("r", 9.0, None, {"y": math.inf}))
    with pytest.raises(ParameterError, match="run 'r' y must be a finite number, not inf"):
        analyze_wda(MEDIAN_CHECK, runs)


def test_wda_config_refuses_infinite_tolerance_terms(tmp_path, capsys):
    cfg = tmp_path / "checks.json"
    cfg.write_text(
        '{"tolerance_check_list": [{"data_filter": {"value_key": "y"},'
        ' "mean_tolerance_params_list": [{"const_term": Infinity}]}]}'
    )
    runs = tmp_path / "runs.csv"
    runs.write_text(WDA_HEADER + "h1,1,,y,1\n")
    assert main(["trend", "wda", "--config", str(cfg), str(runs)]) == 3
    _one_error(capsys, "tolerance_check_list[0] const_term must be a finite number, not inf")


@pytest.mark.parametrize("column", ["timestamp_ms", "build_id"])
def test_wda_refuses_nan_run_order(column, tmp_path):
    p = tmp_path / "runs.csv"
    row = {"timestamp_ms": "1", "build_id": "2", column: "nan"}
    p.write_text(WDA_HEADER + f"h1,{row['timestamp_ms']},{row['build_id']},y,1\n")
    with pytest.raises(ParseError, match=rf"runs.csv:2: {column} 'nan' must be a finite number, not nan"):
        read_wda_runs(p)


# 2. import refuses 1e400; a store holding a bad value names it -----------------------------


def test_import_refuses_a_value_beyond_float64(tmp_path, capsys):
    p = tmp_path / "big.csv"
    p.write_text("test,build,time,value\nip4,1,0,10\nip4,2,100,1e400\n")
    assert main(["trend", "import", str(p), "--store", str(tmp_path / "s")]) == 1
    _one_error(capsys, "big.csv:3: test 'ip4': value '1e400' is out of range (not a finite number)")
    assert not list((tmp_path / "s").glob("results/*.parquet"))


def test_import_refuses_an_infinite_json_value(tmp_path, capsys):
    p = tmp_path / "r.json"
    p.write_text('[{"test": "ip4", "build": "1", "time": 0, "value": 1e400}]')
    assert main(["trend", "import", str(p), "--store", str(tmp_path / "s")]) == 1
    _one_error(capsys, "r.json:1: value 'inf' is not a number")


def test_import_refuses_a_trial_number_beyond_int32(tmp_path, capsys):
    p = tmp_path / "tr.csv"
    p.write_text("test,build,time,trial,value\nip4,1,0,99999999999,10\n")
    assert main(["trend", "import", str(p), "--store", str(tmp_path / "s")]) == 1
    _one_error(capsys, "tr.csv:2: trial '99999999999' is not an integer from 0 to 999,999,999")


@pytest.fixture
def bad_store(tmp_path: Path) -> Path:
    """A store whose file holds inf for ip4 build 2 (written past the import's checks)."""
    store = Store.create(tmp_path / "store")
    records = [{"test": "ip4", "build": str(b), "time": b, "value": 10.0} for b in range(5)]
    table = results_table([*records, {"test": "ip6", "build": "1", "time": 1, "value": 3.0}])
    values = table.column("value").to_pylist()
    values[2] = math.inf
    write_results(store, table.set_column(5, "value", pa.array(values, pa.float64())))
    return store.root


@pytest.mark.parametrize(
    ("verb", "code"), [("analyze", 1), ("check", 3), ("dashboard", 1)], ids=["analyze", "check", "dashboard"]
)
def test_a_bad_stored_value_names_its_test_and_build(verb, code, bad_store, tmp_path, capsys):
    argv = ["trend", verb, "--store", str(bad_store)]
    if verb == "dashboard":
        argv += ["--out", str(tmp_path / "site")]
    assert main(argv) == code
    _one_error(capsys, "test 'ip4' testbed 'default' build '2' holds the value inf, not a finite number >= 0")


def test_the_other_series_still_load(bad_store):
    assert [s.test for s in load_series(bad_store, tests=["ip6"])] == ["ip6"]


@pytest.mark.parametrize("method", ["mdl", "tmm"])
def test_analyze_series_names_the_series_of_a_bad_value(method):
    s = Series(
        "ip4",
        "tb1",
        "pps",
        "bigger-is-better",
        ("b1", "b2"),
        np.array([0, 1]),
        (np.ones(1), np.full(1, np.inf)),
    )
    with pytest.raises(
        ParameterError, match="test 'ip4' testbed 'tb1': build 'b2' holds a value that is not"
    ):
        analyze_series(s, method=method)


# 3. compare: --sbps and --unit in range; never a verdict on NaN bits ------------------------


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--sbps", "1000", "--sbps must be a finite number from 1 to 52, not 1000"),
        ("--sbps", "-5", "--sbps must be a finite number from 1 to 52, not -5"),
        ("--sbps", "nan", "--sbps must be a finite number from 1 to 52, not nan"),
        ("--sbps", "x", "--sbps must be a number, not 'x'"),
        ("--unit", "-1", "--unit must be a finite number > 0, not -1"),
        ("--unit", "0", "--unit must be a finite number > 0, not 0"),
        ("--unit", "inf", "--unit must be a finite number > 0, not inf"),
    ],
    ids=["sbps-1000", "sbps-negative", "sbps-nan", "sbps-text", "unit-negative", "unit-zero", "unit-inf"],
)
def test_compare_refuses_out_of_range_resolution(option, value, message, capsys):
    argv = ["trend", "compare", "--parent", "1,2,3", "--current", "1,2,3", option, value]
    assert main(argv) == 2
    _usage_error(capsys, message)


def test_compare_refuses_a_unit_finer_than_float64(capsys):
    argv = ["trend", "compare", "--parent", "1,2,3", "--current", "1,2,3", "--unit", "1e-300"]
    assert main(argv) == 3
    _one_error(capsys, "unit 1e-300 is finer than float64 resolves at the maximum 3")


@pytest.mark.parametrize("current", ["1,1", "1e308,1e308"])
def test_compare_never_decides_on_overflowing_bits(current, capsys):
    argv = ["trend", "compare", "--parent", "1e308,1e308,1e308", "--current", current]
    assert main(argv) == 3  # no RuntimeWarning either: the tests turn warnings into errors
    _one_error(capsys, "gives no finite description length for values up to 1e+308")


@pytest.mark.parametrize("sbps", [1, 12, 52])
def test_every_allowed_sbps_gives_finite_bits(sbps):
    rng = np.random.default_rng(7)
    r = classify_mdl(np.r_[rng.normal(10, 1, 30), rng.normal(8, 1, 30)], sbps=sbps)
    assert math.isfinite(r.total_bits)
    assert all(math.isfinite(g.bits) for g in r.groups)


@pytest.mark.parametrize("sbps", [0.5, 53, 1000, -5, math.nan, math.inf])
def test_classify_mdl_refuses_sbps_out_of_range(sbps):
    with pytest.raises(ParameterError, match=r"sbps \(significant bits per sample\) must be"):
        classify_mdl([1.0, 2.0, 3.0], sbps=sbps)


def test_resolve_unit_keeps_jumpavgs_defaults():
    assert resolve_unit(8191.0) == resolve_unit(8191.0, sbps=0) == resolve_unit(8191.0, unit=0) == 1.0


# 4. gating verbs: 1 a regression, 3 an error, 2 a usage error ------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--store", "{missing}"],
        ["compare", "--parent-file", "{missing}", "--current-file", "{missing}"],
        ["wda", "--config", "{missing}", "{missing}"],
    ],
    ids=["check", "compare", "wda"],
)
def test_an_error_is_not_a_regression(argv, tmp_path, capsys):
    missing = str(tmp_path / "missing")
    assert main(["trend", *[a.format(missing=missing) for a in argv]]) == 3
    _one_error(capsys, str(tmp_path / "missing"))


def test_a_crash_in_a_gating_verb_is_not_a_regression(tmp_path, capsys, monkeypatch):
    import trend

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(trend, "analyze_wda", boom)
    assert main(_wda_files(tmp_path, "10")) == 3  # not Python's 1
    assert "RuntimeError: a bug" in capsys.readouterr().err  # the traceback stays visible


def test_other_trend_verbs_keep_exit_1_on_an_error(tmp_path, capsys):
    assert main(["trend", "analyze", "--store", str(tmp_path / "missing")]) == 1
    _one_error(capsys, "not a wirepath store with results")


def test_compare_regression_exits_1(capsys):
    assert main(["trend", "compare", "--parent", "10,10.1,9.9,10", "--current", "8,8.1,7.9,8"]) == 1
    assert "verdict: regression" in capsys.readouterr().out


def test_compare_json_of_a_failed_trial_is_json(capsys):
    assert main(["trend", "compare", "--parent", "1,fail", "--current", "1", "--json"]) == 1
    (test,) = _strict_json(capsys.readouterr().out)["tests"]
    assert (test["verdict"], test["parent"]) == ("failed", [1.0, None])


@pytest.mark.parametrize("verb", ["check", "compare", "wda"])
def test_gating_verbs_document_their_exit_statuses(verb, capsys):
    assert main(["trend", verb, "--help"]) == 0
    out = capsys.readouterr().out
    assert "exit status:\n  0  no regression\n  1  " in out
    assert "\n  2  a usage error\n  3  no verdict: " in out


def test_finite_json_and_strict_dumps():
    doc = finite_json({"a": [math.nan, 1.0], "b": {"c": -math.inf}, "d": (math.inf,)})
    assert json.dumps(doc, allow_nan=False) == '{"a": [null, 1.0], "b": {"c": null}, "d": [null]}'


# 5. times out of range -------------------------------------------------------------------


@pytest.mark.parametrize(
    "time", ["1e20", "-1e20", "9999-01-01", "1000-01-01T00:00:00Z", "-9223372036.854775808"]
)
def test_import_refuses_a_time_out_of_range(time, tmp_path, capsys):
    # The last: INT64_MIN, which numpy and pandas read as NaT, is not an instant of a results file.
    p = tmp_path / "t.csv"
    p.write_text(f"test,build,time,value\nip4,1,{time},10\n")
    assert main(["trend", "import", str(p), "--store", str(tmp_path / "s")]) == 1
    _one_error(capsys, f"t.csv:2: time {time!r} is out of range (from 1677-09-21T00:12:43.145224193Z")


@pytest.mark.parametrize(
    ("time", "message"),
    [
        ("1e20", "time '1e20' is out of range"),
        ("inf", "time 'inf' in epoch seconds must be a finite number, not inf"),
        ("nan", "time 'nan' in epoch seconds must be a finite number, not nan"),
    ],
    ids=["1e20", "inf", "nan"],
)
def test_from_paths_refuses_a_time_out_of_range(time, message, tmp_path, capsys):
    paths = tmp_path / "p.json"
    paths.write_text(json.dumps(_ONE_PATTERN))
    argv = ["trend", "from-paths", str(paths), "--store", str(tmp_path), "--build", "1", "--time", time]
    assert main(argv) == 1
    _one_error(capsys, message)


def test_parse_time_ns_at_the_edges():
    assert parse_time_ns("2262-04-11T23:47:16Z") == 9223372036 * 10**9
    with pytest.raises(ParameterError, match="out of range"):
        parse_time_ns(9223372037)
    with pytest.raises(ParameterError, match="must be a finite number"):
        parse_time_ns(math.inf)


def test_trial_windows_refuse_to_wrap_around():
    with pytest.raises(ParameterError, match="end beyond 2262"):
        trial_windows(9_000_000_000 * 10**9, 3600 * 10**9, 10**5)


# 6. counts below their minimum are usage errors -------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "--window", "-3"], "--window must be an integer >= 2, not -3"),
        (["check", "--window", "0"], "--window must be an integer >= 2, not 0"),
        (["dashboard", "--out", "x", "--window", "1"], "--window must be an integer >= 2, not 1"),
        (["analyze", "--window", "2.5"], "--window must be an integer, not '2.5'"),
    ],
    ids=["analyze-negative", "check-zero", "dashboard-one", "fraction"],
)
def test_window_below_two_is_a_usage_error(argv, message, tmp_path, capsys):
    assert main(["trend", argv[0], "--store", str(tmp_path), *argv[1:]]) == 2
    _usage_error(capsys, message)


@pytest.mark.parametrize(
    ("trials", "message"),
    [("-1", "not -1"), ("0", "not 0"), ("10000000", "not 10000000")],
    ids=["negative", "zero", "too-many"],
)
def test_trials_out_of_range_is_a_usage_error(trials, message, tmp_path, capsys):
    argv = ["trend", "from-capture", "x.pcap", "--store", str(tmp_path), "--test", "a", "--build", "1"]
    assert main([*argv, "--trials", trials]) == 2
    _usage_error(capsys, f"--trials must be an integer from 1 to 1,000,000, {message}")


def test_a_window_longer_than_the_series_is_the_whole_series():
    x = [10.0, 10.1, 9.9, 10.0, 10.05, 9.95, 7.0, 10.0, 12.0]
    huge, whole = classify_tmm(x, window=10**12), classify_tmm(x, window=len(x))
    assert huge.marks.tolist() == whole.marks.tolist()
    np.testing.assert_array_equal(huge.tmm, whole.tmm)


# 7. a UTF-8 byte order mark is dropped -----------------------------------------------------


def test_import_csv_with_a_bom(tmp_path, capsys):
    p = tmp_path / "bom.csv"
    p.write_bytes(BOM + b"test,build,time,value\nip4,1,1.0,10\n")
    assert main(["trend", "import", str(p), "--store", str(tmp_path / "s")]) == 0
    (s,) = load_series(tmp_path / "s")
    assert (s.test, s.times_ns.tolist()) == ("ip4", [10**9])


def test_import_json_with_a_bom(tmp_path):
    p = tmp_path / "bom.json"
    p.write_bytes(BOM + b'[{"test": "ip4", "build": "1", "time": 1.0, "value": 10}]')
    assert read_result_rows(p).column("test").to_pylist() == ["ip4"]


def test_compare_file_with_a_bom(tmp_path):
    p = tmp_path / "parent.txt"
    p.write_bytes(BOM + b"ip4: 1, 2\n")
    assert read_compare_file(p) == {"ip4": [1.0, 2.0]}
    p.write_bytes(BOM + b'{"ip4": [1, 2]}')
    assert read_compare_file(p) == {"ip4": [1.0, 2.0]}


def test_wda_files_with_a_bom(tmp_path, capsys):
    argv = _wda_files(tmp_path, "10")
    for path in argv[-2], argv[-1]:
        Path(path).write_bytes(BOM + Path(path).read_bytes())
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("SUCCESS: okay")


def test_from_paths_with_a_bom(tmp_path, capsys):
    paths = tmp_path / "p.json"
    paths.write_bytes(BOM + json.dumps(_ONE_PATTERN).encode())
    argv = ["trend", "from-paths", str(paths), "--store", str(tmp_path), "--build", "1", "--time", "0"]
    assert main([*argv, "--min-count", "1"]) == 0


def test_non_utf8_text_is_one_error(tmp_path, capsys):
    p = tmp_path / "parent.txt"
    p.write_bytes(b"ip4: 1\nip6: \xff\n")
    assert main(["trend", "compare", "--parent-file", str(p), "--current-file", str(p)]) == 3
    _one_error(capsys, "parent.txt:2: not UTF-8 text (byte 0xff)")


# names are shown, not obeyed --------------------------------------------------------------


def test_check_alert_escapes_test_names(tmp_path, capsys):
    evil = "ip4\n| fake | row |\x1b[31m"
    records = [
        {"test": evil, "build": str(b), "time": b * 86_400, "values": [v, v]}
        for b, v in enumerate([10.0] * 8 + [8.0] * 8)
    ]
    store = Store.create(tmp_path / "s")
    write_results(store, results_table(records))
    alert = tmp_path / "alert.md"
    assert main(["trend", "check", "--store", str(store.root), "--alert", str(alert)]) == 1
    out = capsys.readouterr().out
    for text in (out, alert.read_text()):
        rows = [line for line in text.splitlines() if line.startswith("| ip4")]
        assert rows == [rows[0]]
        assert "\x1b" not in text
        assert "\\| fake \\| row \\|" in rows[0]


def test_wda_text_escapes_metric_names(tmp_path, capsys):
    key = "y\nFAKE: okay"
    cfg = {
        "tolerance_check_list": [
            {"data_filter": {"value_key": key}, "median_tolerance_params_list": [{"median_coeff": 0.05}]}
        ]
    }
    argv = _wda_files(tmp_path, "10", cfg)
    runs = Path(argv[-1])
    runs.write_text(WDA_HEADER + "".join(f'h{k},{k},,"{key}",10\n' for k in range(6)))
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("FAKE") for line in lines)
    assert lines[1].startswith("  y\\nFAKE: okay: PASSED")


def test_check_number_messages():
    assert check_number(3, "n", low=1, high=5, integer=True) == 3.0
    for value, message in [
        (True, "n must be an integer from 1 to 5, not True"),
        ("3", "n must be an integer from 1 to 5, not '3'"),
        (2.5, "n must be an integer from 1 to 5, not 2.5"),
    ]:
        with pytest.raises(ParameterError, match=message):
            check_number(value, "n", low=1, high=5, integer=True)


@pytest.mark.parametrize(
    ("trials", "message"),
    [
        ("0", "--trials must be an integer from 1 to 1,000,000, not 0"),
        ("some", "--trials must be an integer, not 'some'"),
    ],
    ids=["zero", "a-word"],
)
def test_from_paths_trials_neither_a_count_nor_all_is_a_usage_error(trials, message, tmp_path, capsys):
    argv = ["trend", "from-paths", "p.json", "--instances", "i.parquet", "--store", str(tmp_path)]
    assert main([*argv, "--build", "1", "--trials", trials]) == 2
    _usage_error(capsys, message)
