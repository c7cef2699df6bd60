"""Trace summaries: counts, span, rate, nodes, edges, call/return balance."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tracefmt import (
    ParameterError,
    SchemaError,
    TraceFileError,
    summarize_trace,
    write_text_trace,
    write_trace,
)

# A hand-built trace: 10 messages over 4 s.
ROWS = [
    (1_000_000_000, "call", "client", "web", 1),
    (1_100_000_000, "call", "web", "db", 2),
    (1_200_000_000, "return", "db", "web", 2),
    (1_300_000_000, "return", "web", "client", 1),
    (2_000_000_000, "call", "client", "web", 3),  # never returns
    (2_500_000_000, "send", "a", "b", None),
    (3_000_000_000, "send", "a", "b", None),
    (3_500_000_000, "send", "b", "a", 9),
    (4_000_000_000, "return", "x", "y", 4),  # a return without its call
    (5_000_000_000, "call", "client", "web", 5),
]
EXPECTED_EDGES = {
    ("client", "web"): 3,
    ("web", "db"): 1,
    ("db", "web"): 1,
    ("web", "client"): 1,
    ("a", "b"): 2,
    ("b", "a"): 1,
    ("x", "y"): 1,
}
EXPECTED_PAIRS = {("client", "web"): (3, 1), ("web", "db"): (1, 1), ("y", "x"): (0, 1)}


def _check(s) -> None:
    assert s.messages == 10
    assert s.start_ns == 1_000_000_000
    assert s.end_ns == 5_000_000_000
    assert s.span_s == 4.0
    assert s.rate_per_s == 2.5
    assert s.op_counts == {"call": 4, "return": 3, "send": 3}
    assert s.edges == EXPECTED_EDGES
    assert s.nodes == ["a", "b", "client", "db", "web", "x", "y"]
    assert s.rpc_pairs == EXPECTED_PAIRS
    assert s.unbalanced_pairs == {("client", "web"): (3, 1), ("y", "x"): (0, 1)}
    assert s.null_ids == 2


@pytest.fixture
def trace_files(tmp_path: Path, make_table) -> dict[str, Path]:
    table = make_table(ROWS)
    paths = {"parquet": tmp_path / "t.parquet", "text": tmp_path / "t.txt", "gz": tmp_path / "t.txt.gz"}
    write_trace(table, paths["parquet"], provenance={"source": "hand"}, row_group_size=3)
    write_text_trace(table, paths["text"])
    write_text_trace(table, paths["gz"])
    return paths


def test_summary_of_a_table(make_table) -> None:
    _check(summarize_trace(make_table(ROWS)))


@pytest.mark.parametrize("form", ["parquet", "text", "gz"])
def test_summary_of_a_file(form: str, trace_files: dict[str, Path]) -> None:
    s = summarize_trace(trace_files[form])
    _check(s)
    assert s.provenance == ({"source": "hand"} if form == "parquet" else {})


def test_summary_does_not_depend_on_row_order(make_table) -> None:
    s = summarize_trace(make_table(ROWS[::-1]))
    _check(s)


def test_summary_columns(tmp_path: Path, make_table) -> None:
    table = make_table(ROWS[:2], bytes=pa.array([1, 2], pa.uint64()), x_k=["p", "q"])
    assert summarize_trace(table).columns == ["bytes", "x_k"]
    write_trace(table, tmp_path / "t.parquet")
    assert summarize_trace(tmp_path / "t.parquet").columns == ["bytes", "x_k"]
    assert summarize_trace(make_table(ROWS[:2])).columns == []


def test_to_json(make_table) -> None:
    doc = summarize_trace(make_table(ROWS)).to_json()
    json.dumps(doc)  # serializable as is
    assert doc["messages"] == 10
    assert doc["start"] == "1970-01-01T00:00:01.000000000Z"
    assert doc["end"] == "1970-01-01T00:00:05.000000000Z"
    assert doc["span_s"] == 4.0
    assert doc["rate_per_s"] == 2.5
    assert doc["ops"] == {"call": 4, "return": 3, "send": 3}
    # Edges most messages first, then by name.
    assert doc["edges"][:2] == [
        {"sender": "client", "receiver": "web", "messages": 3},
        {"sender": "a", "receiver": "b", "messages": 2},
    ]
    assert len(doc["edges"]) == 7
    assert doc["balance"] == {
        "calls": 4,
        "returns": 3,
        "calls_minus_returns": 1,
        "unbalanced_pairs": [
            {"caller": "client", "callee": "web", "calls": 3, "returns": 1},
            {"caller": "y", "callee": "x", "calls": 0, "returns": 1},
        ],
    }
    assert doc["null_ids"] == 2


def test_iso_times_before_1970_and_with_nanoseconds(make_table) -> None:
    doc = summarize_trace(
        make_table([(-1, "send", "a", "b", None), (1_732_872_000_012_953_001, "send", "a", "b", None)])
    ).to_json()
    assert doc["start"] == "1969-12-31T23:59:59.999999999Z"
    assert doc["end"] == "2024-11-29T09:20:00.012953001Z"


def test_describe(make_table) -> None:
    text = summarize_trace(make_table(ROWS)).describe(max_edges=2)
    lines = text.splitlines()
    assert lines[0] == "messages   10 (call 4, return 3, send 3)"
    assert "1970-01-01T00:00:01.000000000Z .. 1970-01-01T00:00:05.000000000Z" in lines[1]
    assert "(4 s, 2.5 msg/s)" in lines[1]
    assert lines[2] == "nodes      7: a b client db web x y"
    assert lines[3] == "edges      7 directed"
    assert lines[4].split() == ["client", "->", "web", "3"]
    assert lines[5].split() == ["a", "->", "b", "2"]
    assert lines[6] == "  ... 5 more"
    assert "calls - returns = +1; 2 of 3 RPC pairs unbalanced" in text
    assert "2 messages without an id" in text


def test_single_message(make_table) -> None:
    s = summarize_trace(make_table([(7, "call", "a", "b", 1)]))
    assert (s.messages, s.start_ns, s.end_ns, s.span_s, s.rate_per_s) == (1, 7, 7, 0.0, 0.0)
    assert s.unbalanced_pairs == {("a", "b"): (1, 0)}


@pytest.mark.parametrize("form", ["table", "parquet", "text"])
def test_empty_trace(form: str, tmp_path: Path, make_table) -> None:
    table = make_table([])
    if form == "table":
        source = table
    elif form == "parquet":
        source = tmp_path / "e.parquet"
        write_trace(table, source)
    else:
        source = tmp_path / "e.txt"
        source.write_text("# nothing here\n")
    s = summarize_trace(source)
    assert (s.messages, s.start_ns, s.end_ns, s.span_s, s.rate_per_s) == (0, None, None, 0.0, 0.0)
    assert s.edges == {}
    assert s.nodes == []
    assert s.rpc_pairs == {}
    assert s.op_counts == {"call": 0, "return": 0, "send": 0}
    doc = s.to_json()
    assert doc["start"] is None
    assert doc["end"] is None
    assert "messages   0" in s.describe()


def test_invalid_table() -> None:
    with pytest.raises(SchemaError, match="missing column 'op'"):
        summarize_trace(
            pa.table(
                {
                    "timestamp": pa.array([1], pa.timestamp("ns")),
                    "sender": ["a"],
                    "receiver": ["b"],
                    "id": pa.array([1], pa.uint64()),
                }
            )
        )


@pytest.mark.parametrize(
    ("name", "error"),
    [("missing.parquet", TraceFileError), ("missing.txt", TraceFileError), ("t.csv", ParameterError)],
    ids=["missing-parquet", "missing-text", "unknown-type"],
)
def test_bad_paths(name: str, error: type[Exception], tmp_path: Path) -> None:
    with pytest.raises(error) as info:
        summarize_trace(tmp_path / name)
    assert name in str(info.value)
