"""Converting between the text form and Parquet, chosen by file name."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import (
    OPS,
    ParameterError,
    ParseError,
    TraceFileError,
    convert_trace,
    iter_any_trace,
    read_text_trace,
    read_trace,
    read_trace_metadata,
    trace_format,
    write_text_trace,
    write_trace,
)

UINT64_MAX = 2**64 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ns(dt: datetime) -> int:
    d = dt - EPOCH
    return (d.days * 86_400 + d.seconds) * 10**9 + d.microseconds * 1_000


@pytest.mark.parametrize(
    ("name", "form"),
    [
        pytest.param("a.parquet", "parquet", id="parquet"),
        pytest.param("a.pq", "parquet", id="pq"),
        pytest.param("A.PARQUET", "parquet", id="upper-case"),
        pytest.param("a.txt", "text", id="txt"),
        pytest.param("a.txt.gz", "text", id="txt.gz"),
        pytest.param("a.trace", "text", id="trace"),
        pytest.param("dir.parquet/a.trace.gz", "text", id="trace.gz-in-dotted-dir"),
    ],
)
def test_trace_format(name: str, form: str) -> None:
    assert trace_format(name) == form


@pytest.mark.parametrize("name", ["a.csv", "a.gz", "a", "a.parquet.bak"], ids=["csv", "gz", "none", "bak"])
def test_trace_format_unknown(name: str) -> None:
    with pytest.raises(ParameterError, match="unknown trace file type") as info:
        trace_format(name)
    message = str(info.value)
    assert message.startswith(f"{name}: ")
    for suffix in (".parquet", ".pq", ".txt", ".txt.gz", ".trace"):
        assert suffix in message


NAME_ALPHABET = "abcxyzABC0189._:-/@" + "äöüßéñΩλДж中"
names = st.text(alphabet=NAME_ALPHABET, min_size=1, max_size=10)
ids = st.one_of(st.none(), st.sampled_from([0, UINT64_MAX]), st.integers(0, UINT64_MAX))
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
OLDEST = INT64_MIN + 1  # INT64_MIN is numpy's and pandas' NaT: no trace holds it
# Every instant the schema holds (int64 ns), with the ends drawn often.
timestamps = st.one_of(st.integers(OLDEST, INT64_MAX), st.sampled_from([OLDEST, INT64_MAX, -1, 0]))


@settings(max_examples=50, deadline=None)
@given(rows=st.lists(st.tuples(timestamps, st.sampled_from(OPS), names, names, ids), min_size=1, max_size=12))
def test_text_to_parquet_to_text_keeps_every_field(
    rows: list[tuple], tmp_path_factory: pytest.TempPathFactory, make_table, rows_of
) -> None:
    d = tmp_path_factory.mktemp("conv")
    write_text_trace(make_table(rows), d / "in.txt")
    first = convert_trace(d / "in.txt", d / "mid.parquet")
    assert first.messages == len(rows)
    assert rows_of(read_trace(d / "mid.parquet")) == rows
    second = convert_trace(d / "mid.parquet", d / "out.txt")
    assert second.messages == len(rows)
    assert rows_of(read_text_trace(d / "out.txt")) == rows
    # Byte for byte the same text, order included.
    assert (d / "out.txt").read_bytes() == (d / "in.txt").read_bytes()


def test_text_to_parquet_hand_written(tmp_path: Path, rows_of) -> None:
    src = tmp_path / "in.txt"
    src.write_text(
        "# a trace\n"
        "1732872000.012953 call client WS1 1001\n"
        "1732872000.0137041234 call WS1 AP1 req-7\n"
        "2024-11-29T09:20:00.5+01:00 return AP1 WS1 -\n"
        "-0.5 send x y 18446744073709551615\n"
    )
    report = convert_trace(src, tmp_path / "out.parquet")
    assert report.messages == 4
    assert report.lines == 5
    assert report.skipped == 0
    assert report.hashed_ids == 1
    assert report.sorted is False
    h = 0xCBF29CE484222325
    for b in b"req-7":
        h = ((h ^ b) * 0x100000001B3) % 2**64
    assert rows_of(read_trace(tmp_path / "out.parquet")) == [
        (1_732_872_000_012_953_000, "call", "client", "WS1", 1001),
        (1_732_872_000_013_704_123, "call", "WS1", "AP1", h),
        (_ns(datetime(2024, 11, 29, 8, 20, 0, 500_000, tzinfo=UTC)), "return", "AP1", "WS1", None),
        (-500_000_000, "send", "x", "y", UINT64_MAX),
    ]


def test_parquet_to_text_file_content(tmp_path: Path, make_table) -> None:
    rows = [(1_500_000_000, "call", "a", "b", 9), (-2, "return", "b", "a", None)]
    write_trace(make_table(rows), tmp_path / "in.parquet")
    convert_trace(tmp_path / "in.parquet", tmp_path / "out.txt")
    assert (tmp_path / "out.txt").read_text() == (
        "# timestamp op sender receiver id\n1.500000000 call a b 9\n-0.000000002 return b a -\n"
    )


def test_parquet_to_gzip_text(tmp_path: Path, make_table) -> None:
    rows = [(1, "send", "a", "b", None)]
    write_trace(make_table(rows), tmp_path / "in.parquet")
    convert_trace(tmp_path / "in.parquet", tmp_path / "out.txt.gz")
    text = gzip.decompress((tmp_path / "out.txt.gz").read_bytes()).decode()
    assert text.splitlines()[1:] == ["0.000000001 send a b -"]


def test_parquet_to_parquet_keeps_rows_columns_and_provenance(tmp_path: Path, make_table, rows_of) -> None:
    rows = [(3, "send", "a", "b", 1), (1, "call", "b c", "a", None)]
    table = make_table(rows, proto=["tcp", None], x_k=pa.array([1, 2], pa.int16()))
    write_trace(table, tmp_path / "in.parquet", provenance={"capture": "eth0"})
    report = convert_trace(tmp_path / "in.parquet", tmp_path / "out.parquet")
    assert report.messages == 2
    back = read_trace(tmp_path / "out.parquet")
    assert rows_of(back) == rows  # unsorted input stays in its order
    assert back["proto"].to_pylist() == ["tcp", None]
    assert back["x_k"].to_pylist() == [1, 2]
    prov = read_trace_metadata(tmp_path / "out.parquet").provenance
    assert prov["capture"] == "eth0"
    assert prov["source"] == str(tmp_path / "in.parquet")


def test_text_to_parquet_provenance(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("2 send a b x\n1 send a b 5\noops\n")
    convert_trace(src, tmp_path / "out.parquet", skip_bad=True, sort=True)
    prov = read_trace_metadata(tmp_path / "out.parquet").provenance
    assert prov == {
        "source": str(src),
        "converted_from": "text",
        "skipped_lines": 1,
        "hashed_ids": 1,
        "sorted": True,
    }


@pytest.mark.parametrize("target", ["out.parquet", "out.txt"], ids=["to-parquet", "to-text"])
def test_sort_is_stable(target: str, tmp_path: Path, rows_of) -> None:
    src = tmp_path / "in.txt"
    src.write_text("3 send a b 1\n1 send a b 2\n3 send a b 3\n2 send a b 4\n1 send a b 5\n")
    report = convert_trace(src, tmp_path / target, sort=True)
    assert report.sorted is True
    out = tmp_path / target
    table = read_trace(out) if target.endswith(".parquet") else read_text_trace(out)
    assert [(r[0], r[4]) for r in rows_of(table)] == [
        (1 * 10**9, 2),
        (1 * 10**9, 5),
        (2 * 10**9, 4),
        (3 * 10**9, 1),
        (3 * 10**9, 3),
    ]


def test_sort_from_parquet(tmp_path: Path, make_table, rows_of) -> None:
    rng = np.random.default_rng(5)
    ts = rng.integers(0, 20, 60).tolist()
    rows = [(t, "send", "a", "b", i) for i, t in enumerate(ts)]
    write_trace(make_table(rows), tmp_path / "in.parquet", row_group_size=7)
    convert_trace(tmp_path / "in.parquet", tmp_path / "out.parquet", sort=True)
    assert rows_of(read_trace(tmp_path / "out.parquet")) == sorted(rows, key=lambda r: r[0])


def test_sort_empty_text(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("# nothing\n")
    report = convert_trace(tmp_path / "in.txt", tmp_path / "out.parquet", sort=True)
    assert report.messages == 0
    assert read_trace(tmp_path / "out.parquet").num_rows == 0


def test_empty_text_to_parquet(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_bytes(b"")
    assert convert_trace(tmp_path / "in.txt", tmp_path / "out.parquet").messages == 0
    assert read_trace(tmp_path / "out.parquet").num_rows == 0


def test_skip_bad_report(tmp_path: Path, rows_of) -> None:
    src = tmp_path / "in.txt"
    src.write_text("1 call a b 1\n2 cal a b 1\n3 return b a 1\n4 send a\n")
    report = convert_trace(src, tmp_path / "out.parquet", skip_bad=True)
    assert (report.messages, report.skipped, report.lines) == (2, 2, 4)
    assert report.examples[0] == f"{src}:2: unknown op 'cal' (must be one of call, return, send)"
    assert report.examples[1].startswith(f"{src}:4: expected 5 fields")
    assert [r[0] for r in rows_of(read_trace(tmp_path / "out.parquet"))] == [10**9, 3 * 10**9]
    doc = report.to_json()
    assert doc["skipped"] == 2
    assert doc["source"] == str(src)


def test_bad_line_fails_and_leaves_no_output(tmp_path: Path) -> None:
    src = tmp_path / "in.txt"
    src.write_text("1 call a b 1\n2 cal a b 1\n")
    with pytest.raises(ParseError, match=r"in\.txt:2: unknown op 'cal'"):
        convert_trace(src, tmp_path / "out.parquet")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_unknown_extension(tmp_path: Path) -> None:
    (tmp_path / "in.txt").write_text("1 call a b 1\n")
    with pytest.raises(ParameterError, match=r"out\.csv: unknown trace file type"):
        convert_trace(tmp_path / "in.txt", tmp_path / "out.csv")


@pytest.mark.parametrize("name", ["missing.txt", "missing.parquet"], ids=["text", "parquet"])
def test_missing_input(name: str, tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        convert_trace(tmp_path / name, tmp_path / "out.pq")
    assert list(tmp_path.iterdir()) == []


def test_output_must_not_overwrite_input(tmp_path: Path, make_table) -> None:
    write_trace(make_table([(1, "send", "a", "b", None)]), tmp_path / "t.parquet")
    with pytest.raises(ParameterError, match="would overwrite the input"):
        convert_trace(tmp_path / "t.parquet", tmp_path / "." / "t.parquet")


def test_progress_callback_counts_up_to_total(tmp_path: Path, make_table) -> None:
    rows = [(i, "send", "a", "b", i) for i in range(10)]
    write_trace(make_table(rows), tmp_path / "in.parquet")
    seen: list[int] = []
    convert_trace(tmp_path / "in.parquet", tmp_path / "out.txt", on_progress=seen.append)
    assert seen
    assert seen == sorted(seen)
    assert seen[-1] == 10


def test_iter_any_trace_reads_both_forms(tmp_path: Path, make_table, rows_of) -> None:
    rows = [(1, "call", "a", "b", 1), (2, "return", "b", "a", 1)]
    write_trace(make_table(rows), tmp_path / "t.parquet")
    write_text_trace(make_table(rows), tmp_path / "t.trace")
    for name in ("t.parquet", "t.trace"):
        assert [r for t in iter_any_trace(tmp_path / name) for r in rows_of(t)] == rows
