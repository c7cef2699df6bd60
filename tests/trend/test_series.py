"""The results store: import files, bad input, replacement of re-imported builds, series order."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from tracefmt import ParameterError, ParseError, Store
from trend import RESULTS_SCHEMA, load_series, read_result_rows, write_results

HEADER = "test,testbed,build,time,trial,value,unit,direction,tags\n"


def _csv(tmp_path, body, header=HEADER, name="r.csv"):
    p = tmp_path / name
    p.write_text(header + body)
    return p


def test_csv_import_round_trip(tmp_path):
    p = _csv(
        tmp_path,
        "ip4,tb1,b2,2024-05-02T02:00:00Z,0,11.0,Mpps,bigger-is-better,mrr;64b\n"
        "ip4,tb1,b2,2024-05-02T02:00:00Z,1,fail,Mpps,bigger-is-better,mrr;64b\n"
        "ip4,tb1,b1,2024-05-01T02:00:00Z,0,10.0,Mpps,bigger-is-better,mrr\n"
        "ip4,tb1,b1,2024-05-01T02:00:00Z,1,10.2,Mpps,bigger-is-better,mrr\n",
    )
    store = Store.create(tmp_path / "store")
    path = write_results(store, read_result_rows(p), name="r")
    assert pq.read_schema(path).names == RESULTS_SCHEMA.names
    (s,) = load_series(store)
    assert (s.test, s.testbed, s.unit, s.direction) == ("ip4", "tb1", "Mpps", "bigger-is-better")
    assert s.builds == ("b1", "b2")  # time order, not file order
    assert s.values.tolist() == [pytest.approx(10.1), 11.0]
    assert s.failed_trials.tolist() == [0, 1]
    assert pq.read_table(path).column("tags").to_pylist()[0] == ["mrr", "64b"]


def test_optional_columns_default_and_trials_follow_row_order(tmp_path):
    p = _csv(tmp_path, "ip4,b1,1714528800,10\nip4,b1,1714528800,12\n", header="test,build,time,value\n")
    t = read_result_rows(p)
    assert t.column("trial").to_pylist() == [0, 1]
    assert t.column("testbed").to_pylist() == ["default"] * 2
    assert t.column("direction").to_pylist() == ["bigger-is-better"] * 2


def test_json_with_trial_lists(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(
        json.dumps(
            {
                "results": [
                    {
                        "test": "lat",
                        "build": "r1",
                        "time": "2024-05-01",
                        "values": [0.02, None, 0.03],
                        "unit": "s",
                        "direction": "smaller-is-better",
                    }
                ]
            }
        )
    )
    t = read_result_rows(p)
    values = t.column("value").to_pylist()
    assert values[0] == 0.02
    assert math.isnan(values[1])
    assert t.column("trial").to_pylist() == [0, 1, 2]


def test_reimport_replaces_the_build(tmp_path):
    store = Store.create(tmp_path / "store")
    write_results(store, read_result_rows(_csv(tmp_path, "ip4,tb,b1,2024-05-01,0,10,pps,,\n")), name="a")
    write_results(store, read_result_rows(_csv(tmp_path, "ip4,tb,b1,2024-05-01,0,12,pps,,\n", name="b.csv")))
    (s,) = load_series(store)
    assert s.values.tolist() == [12.0]


@pytest.mark.parametrize(
    ("header", "body", "message"),
    [
        ("test,build,value\n", "ip4,b1,10\n", "r.csv:2: missing column 'time'"),
        ("test,build,time,value,speed\n", "ip4,b1,0,10,1\n", "unknown column 'speed'"),
        ("test,build,time,value\n", "ip4,b1,0,fast\n", r"r.csv:2: value 'fast' is not a number"),
        ("test,build,time,value\n", "ip4,b1,0,-3\n", "r.csv:2: value -3 is negative"),
        ("test,build,time,value\n", "ip4,b1,0,inf\n", "not a number"),
        ("test,build,time,value\n", "ip4,b1,yesterday,1\n", "neither ISO-8601"),
        ("test,build,time,value,direction\n", "ip4,b1,0,1,up\n", "direction 'up'"),
        ("test,build,time,trial,value\n", "ip4,b1,0,0,1\nip4,b1,0,0,2\n", "r.csv:3: duplicate: test 'ip4'"),
        ("test,build,time,value\n", "ip4,b1,0\n", "3 fields, the header has 4"),
        ("test,build,time,value\n", "", "no results"),
        ("", "", "empty file"),
    ],
    ids=[
        "missing",
        "unknown",
        "text",
        "negative",
        "inf",
        "time",
        "direction",
        "duplicate",
        "short",
        "none",
        "empty",
    ],
)
def test_bad_import_files(tmp_path, header, body, message):
    with pytest.raises(ParseError, match=message):
        read_result_rows(_csv(tmp_path, body, header=header))


def test_wrong_extension_and_bad_json(tmp_path):
    with pytest.raises(ParameterError, match=r"\.csv, \.json or \.jsonl"):
        read_result_rows(_csv(tmp_path, "", name="r.txt"))
    p = tmp_path / "r.json"
    p.write_text('{"results": 3}')
    with pytest.raises(ParseError, match="list of objects"):
        read_result_rows(p)


def test_load_series_filters_and_sorts(tmp_path):
    store = Store.create(tmp_path / "store")
    body = "".join(f"ip{v},tb,b{k},{1000 - k},0,{k + 1},pps,,\n" for v in (4, 6) for k in range(3))
    write_results(store, read_result_rows(_csv(tmp_path, body)))
    series = load_series(store, tests=["ip6"])
    assert [s.test for s in series] == ["ip6"]
    assert series[0].builds == ("b2", "b1", "b0")
    assert np.all(np.diff(series[0].times_ns) > 0)
    assert load_series(store, tests=["nothing"]) == []


def test_json_record_without_value_or_with_blank_lines_in_csv(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(
        json.dumps(
            [{"test": "a", "build": "1", "time": 0, "value": 1}, {"test": "a", "build": "2", "time": 1}]
        )
    )
    with pytest.raises(ParseError, match=r"r\.json:2: missing column 'value'"):
        read_result_rows(p)
    c = _csv(tmp_path, "ip4,b1,0,1\n\n\nip4,b2,0,x\n", header="test,build,time,value\n")
    with pytest.raises(ParseError, match=r"r.csv:5: value 'x' is not a number"):
        read_result_rows(c)


def test_csv_and_json_give_the_same_table(tmp_path):
    c = _csv(
        tmp_path,
        "ip4,tb,b1,2024-05-01T02:00:00Z,,10.5,pps,,mrr; 64b\n"
        "ip4,tb,b1,2024-05-01T02:00:00Z,,fail,pps,,mrr; 64b\n",
    )
    j = tmp_path / "r.json"
    j.write_text(
        json.dumps(
            [
                {
                    "test": "ip4",
                    "testbed": "tb",
                    "build": "b1",
                    "time": "2024-05-01T02:00:00Z",
                    "values": [10.5, "fail"],
                    "unit": "pps",
                    "tags": "mrr; 64b",
                }
            ]
        )
    )
    a, b = read_result_rows(c), read_result_rows(j)
    assert a.drop_columns(["value"]).equals(b.drop_columns(["value"]))
    assert a.column("value").to_pylist()[0] == b.column("value").to_pylist()[0] == 10.5
    assert a.column("tags").to_pylist()[0] == ["mrr", "64b"]
