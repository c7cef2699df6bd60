"""The Parquet store: whole and streaming reads and writes, metadata, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracefmt import (
    CORE_COLUMNS,
    OPS,
    OPTIONAL_FIELDS,
    SCHEMA_VERSION,
    SchemaError,
    TraceFileError,
    TraceWriter,
    iter_trace,
    read_trace,
    read_trace_metadata,
    write_trace,
)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
OLDEST = INT64_MIN + 1  # INT64_MIN is numpy's and pandas' NaT: no trace holds it
UINT64_MAX = 2**64 - 1
TS = pa.timestamp("ns", tz="UTC")


def _sample_rows(n: int, seed: int = 1) -> list[tuple]:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, 10**12, n))
    nodes = ["client", "WS1", "WS2", "AP1", "DB1"]
    return [
        (
            int(ts[i]),
            OPS[int(rng.integers(3))],
            nodes[int(rng.integers(5))],
            nodes[int(rng.integers(5))],
            None if rng.random() < 0.2 else int(rng.integers(0, 2**63)),
        )
        for i in range(n)
    ]


# --- round trips ---------------------------------------------------------------------------

names = st.text(min_size=0, max_size=8)  # Parquet takes any string, spaces and all
ids = st.one_of(st.none(), st.sampled_from([0, UINT64_MAX]), st.integers(0, UINT64_MAX))
rows_strategy = st.lists(
    st.tuples(st.integers(OLDEST, INT64_MAX), st.sampled_from(OPS), names, names, ids),
    min_size=0,
    max_size=20,
)


@settings(max_examples=50, deadline=None)
@given(rows=rows_strategy, row_group=st.integers(1, 8), data=st.data())
def test_parquet_round_trip_keeps_every_field(
    rows: list[tuple],
    row_group: int,
    data: st.DataObject,
    tmp_path_factory: pytest.TempPathFactory,
    make_table,
    rows_of,
) -> None:
    n = len(rows)
    opt = st.lists(st.one_of(st.none(), st.integers(0, UINT64_MAX)), min_size=n, max_size=n)
    txt = st.lists(st.one_of(st.none(), st.text(max_size=5)), min_size=n, max_size=n)
    extra = {
        "bytes": pa.array(data.draw(opt), pa.uint64()),
        "flow": pa.array(data.draw(opt), pa.uint64()),
        "proto": pa.array(data.draw(txt), pa.string()),
        "label": pa.array(data.draw(txt), pa.string()),
        "point": pa.array(data.draw(txt), pa.string()),
        "x_note": pa.array(data.draw(txt), pa.string()),
    }
    path = tmp_path_factory.mktemp("pq") / "t.parquet"
    write_trace(make_table(rows, **extra), path, row_group_size=row_group)
    back = read_trace(path)
    assert rows_of(back) == rows
    for name, col in extra.items():
        assert back[name].to_pylist() == col.to_pylist(), name
    # Parquet -> Parquet keeps it all as well.
    again = path.with_name("again.parquet")
    write_trace(back, again)
    back2 = read_trace(again)
    assert rows_of(back2) == rows
    for name, col in extra.items():
        assert back2[name].to_pylist() == col.to_pylist(), name


def test_round_trip_hand_written_rows(tmp_path: Path, make_table, rows_of) -> None:
    rows = [
        (OLDEST, "call", "client", "web server", 0),
        (-1, "return", "web server", "client", UINT64_MAX),
        (0, "send", "", "#x", None),
        (INT64_MAX, "send", "ä", "中", 12345),
    ]
    path = tmp_path / "t.parquet"
    write_trace(make_table(rows), path)
    assert rows_of(read_trace(path)) == rows


def test_the_nat_instant_is_refused_on_writing_and_reading(tmp_path: Path, make_table) -> None:
    """INT64_MIN is numpy's and pandas' missing time: a trace holding it would lose a
    message's time in any notebook, so neither the writer nor the reader takes it."""
    rows = [(INT64_MIN, "call", "a", "b", 1), (0, "return", "b", "a", 1)]
    path = tmp_path / "t.parquet"
    with pytest.raises(SchemaError, match=r"-9223372036\.854775808 .*NaT.*1677-09-21T00:12:43\.145224193Z"):
        write_trace(make_table(rows), path)
    assert not path.exists()
    # Written by another tool: refused on reading, with the same line.
    raw = make_table(rows)
    pq.write_table(pa.table({n: raw[n] for n in raw.column_names}), path)
    with pytest.raises(SchemaError, match="NaT"):
        read_trace(path)


def test_read_trace_gives_canonical_schema(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    write_trace(make_table(_sample_rows(10)), path)
    t = read_trace(path)
    assert t.column_names == list(CORE_COLUMNS)
    assert t["timestamp"].type == TS
    assert t["sender"].type == pa.dictionary(pa.int32(), pa.string())
    assert t["op"].chunk(0).dictionary.to_pylist() == list(OPS)
    assert t["id"].type == pa.uint64()


@pytest.mark.parametrize("batch_size", [1, 3, 64, 1000], ids=lambda b: f"batch{b}")
def test_iter_trace_batches(batch_size: int, tmp_path: Path, make_table, rows_of) -> None:
    rows = _sample_rows(100)
    path = tmp_path / "t.parquet"
    write_trace(make_table(rows), path, row_group_size=30)
    batches = list(iter_trace(path, batch_size=batch_size))
    assert all(0 < b.num_rows <= batch_size for b in batches)
    assert len(batches) >= -(-100 // batch_size)
    assert [r for b in batches for r in rows_of(b)] == rows
    for b in batches:
        assert b.column_names == list(CORE_COLUMNS)
        assert b["op"].chunk(0).dictionary.to_pylist() == list(OPS)


@pytest.mark.parametrize("batch_size", [0, -5], ids=["zero", "negative"])
def test_iter_trace_rejects_bad_batch_size(batch_size: int, tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    write_trace(make_table(_sample_rows(3)), path)
    with pytest.raises(SchemaError, match=f"batch_size must be positive, not {batch_size}"):
        list(iter_trace(path, batch_size=batch_size))


def test_column_projection(tmp_path: Path, make_table) -> None:
    rows = _sample_rows(5)
    path = tmp_path / "t.parquet"
    write_trace(make_table(rows, bytes=pa.array(range(5), pa.uint64()), label=["a"] * 5), path)
    assert read_trace(path).column_names == [*CORE_COLUMNS, "bytes", "label"]
    assert read_trace(path, columns=["label"]).column_names == [*CORE_COLUMNS, "label"]
    assert read_trace(path, columns=[]).column_names == list(CORE_COLUMNS)
    got = [b.column_names for b in iter_trace(path, columns=["bytes"])]
    assert got == [[*CORE_COLUMNS, "bytes"]]
    with pytest.raises(SchemaError, match="no column 'flow' in this trace"):
        read_trace(path, columns=["flow"])


def test_empty_trace_round_trip(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    write_trace(make_table([]), path)
    t = read_trace(path)
    assert t.num_rows == 0
    assert t.column_names == list(CORE_COLUMNS)
    assert list(iter_trace(path)) == []
    assert read_trace_metadata(path).messages == 0


# --- metadata ------------------------------------------------------------------------------


def test_provenance_round_trip(tmp_path: Path, make_table) -> None:
    provenance = {
        "source": "capture on eth0",
        "offsets_ns": {"a.parquet": -12_000_000, "b.parquet": 0},
        "dropped": [1, 2, 3],
        "ratio": 0.5,
        "ok": True,
        "none": None,
        "name": "Zürich",
    }
    path = tmp_path / "t.parquet"
    write_trace(make_table(_sample_rows(7)), path, provenance=provenance, row_group_size=3)
    meta = read_trace_metadata(path)
    assert meta.provenance == provenance
    assert meta.schema_version == SCHEMA_VERSION
    assert meta.messages == 7
    assert meta.row_groups == 3
    assert meta.path == str(path)
    assert meta.schema is not None
    assert meta.schema.names == list(CORE_COLUMNS)


def test_plain_parquet_without_wirepath_metadata_is_readable(tmp_path: Path, make_table, rows_of) -> None:
    rows = [(5, "call", "a", "b", 1), (6, "return", "b", "a", 1)]
    path = tmp_path / "plain.parquet"
    # A file from another tool: plain strings, microsecond timestamps, int64 ids.
    table = make_table(rows)
    table = table.set_column(0, "timestamp", pa.array([0, 1], pa.timestamp("us")))
    table = table.set_column(4, "id", pa.array([1, 1], pa.int64()))
    pq.write_table(table, path)
    meta = read_trace_metadata(path)
    assert meta.schema_version is None
    assert meta.provenance == {}
    assert rows_of(read_trace(path)) == [(0, "call", "a", "b", 1), (1_000, "return", "b", "a", 1)]


def _with_wirepath_metadata(path: Path, doc: str, make_table) -> None:
    table = make_table([(1, "send", "a", "b", None)]).replace_schema_metadata({"wirepath": doc})
    pq.write_table(table, path)


def test_newer_schema_version_is_refused(tmp_path: Path, make_table) -> None:
    path = tmp_path / "future.parquet"
    _with_wirepath_metadata(path, json.dumps({"schema_version": SCHEMA_VERSION + 1}), make_table)
    assert read_trace_metadata(path).schema_version == SCHEMA_VERSION + 1
    expected = rf"trace schema version {SCHEMA_VERSION + 1} is newer than this wirepath reads"
    with pytest.raises(TraceFileError, match=expected) as info:
        read_trace(path)
    assert str(path) in str(info.value)
    with pytest.raises(TraceFileError, match=expected):
        list(iter_trace(path))


def test_current_schema_version_is_accepted(tmp_path: Path, make_table) -> None:
    path = tmp_path / "now.parquet"
    _with_wirepath_metadata(path, json.dumps({"schema_version": SCHEMA_VERSION}), make_table)
    assert read_trace(path).num_rows == 1


def test_corrupt_wirepath_metadata(tmp_path: Path, make_table) -> None:
    path = tmp_path / "bad.parquet"
    _with_wirepath_metadata(path, "{not json", make_table)
    with pytest.raises(TraceFileError, match="wirepath metadata is not valid JSON") as info:
        read_trace_metadata(path)
    assert str(path) in str(info.value)


# --- optional and free columns -------------------------------------------------------------


def test_optional_columns_are_typed_as_the_schema_says(tmp_path: Path, make_table) -> None:
    n = 4
    table = make_table(
        _sample_rows(n),
        bytes=pa.array([10, None, 30, 40], pa.int32()),
        flow=pa.array([1, 1, 2, 2], pa.uint16()),
        proto=pa.array(["http", "dns", None, "http"]),
        label=pa.array(["GET /", "GET /", "POST /cart", None], pa.large_string()),
        status=pa.array([None, "200", None, "503"]),
        point=pa.array(["tap1"] * n),
        request_id=pa.array(["r1", None, "r2", "r2"], pa.large_string()),
        span_id=pa.array([None, "00f067aa0ba902b7", None, None]),
        trace_id=pa.array(["4bf92f3577b34da6a3ce929d0e0e4736"] * n),
        src_ip=pa.array(["10.0.0.1", "10.0.0.2", "::1", None]),
        src_port=pa.array([40000, 80, 5, None], pa.int64()),
        dst_ip=pa.array(["10.0.0.2", "10.0.0.1", "::1", None]),
        dst_port=pa.array([80, 40000, 6, None], pa.int64()),
        stream=pa.array([0, 0, 1, None], pa.int64()),
    )
    path = tmp_path / "t.parquet"
    write_trace(table, path)
    back = read_trace(path)
    assert back.column_names == [*CORE_COLUMNS, *(f.name for f in OPTIONAL_FIELDS)]
    for f in OPTIONAL_FIELDS:
        assert back.schema.field(f.name).type == f.type, f.name
    assert back["bytes"].to_pylist() == [10, None, 30, 40]
    assert back["flow"].to_pylist() == [1, 1, 2, 2]
    assert back["proto"].to_pylist() == ["http", "dns", None, "http"]
    assert back["label"].to_pylist() == ["GET /", "GET /", "POST /cart", None]
    assert back["status"].to_pylist() == [None, "200", None, "503"]
    assert back["point"].to_pylist() == ["tap1"] * n


def test_free_columns_are_kept(tmp_path: Path, make_table) -> None:
    table = make_table(
        _sample_rows(3),
        true_instance=pa.array([7, 7, 8], pa.int32()),
        x_comment=pa.array(["a", None, "c"]),
    )
    path = tmp_path / "t.parquet"
    write_trace(table, path)
    back = read_trace(path)
    assert back.column_names == [*CORE_COLUMNS, "true_instance", "x_comment"]
    assert back["true_instance"].type == pa.int32()
    assert back["true_instance"].to_pylist() == [7, 7, 8]
    assert back["x_comment"].to_pylist() == ["a", None, "c"]


def test_dictionaries_are_unified_across_row_groups(tmp_path: Path, make_table, rows_of) -> None:
    # Each row group has its own node set, so each stores its own dictionary.
    groups = [["a", "b"], ["c", "d"], ["b", "e"], ["f", "a"]]
    rows = []
    for g, (s, r) in enumerate(groups):
        rows += [(g * 10 + i, OPS[i % 3], s, r, g * 10 + i) for i in range(5)]
    path = tmp_path / "t.parquet"
    write_trace(make_table(rows, point=[f"p{i // 5}" for i in range(20)]), path, row_group_size=5)
    assert read_trace_metadata(path).row_groups == 4
    back = read_trace(path)
    assert rows_of(back) == rows
    for name in ("sender", "receiver", "op", "point"):
        col = back[name]
        assert col.num_chunks == 1, name
        dictionary = col.chunk(0).dictionary.to_pylist()
        assert len(dictionary) == len(set(dictionary)), name
    assert sorted(back["sender"].chunk(0).dictionary.to_pylist()) == ["a", "b", "c", "f"]
    assert back["point"].to_pylist() == [f"p{i // 5}" for i in range(20)]


# --- bad files -----------------------------------------------------------------------------


def _truncated(path: Path, make_table) -> Path:
    write_trace(make_table(_sample_rows(200)), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def _random_bytes(path: Path, make_table) -> Path:
    path.write_bytes(np.random.default_rng(3).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return path


def _empty(path: Path, make_table) -> Path:
    path.write_bytes(b"")
    return path


def _text_named_parquet(path: Path, make_table) -> Path:
    path.write_text("1 call a b 1\n")
    return path


def _directory(path: Path, make_table) -> Path:
    path.mkdir()
    return path


def _missing(path: Path, make_table) -> Path:
    return path


@pytest.mark.parametrize(
    ("make_bad", "pattern"),
    [
        pytest.param(_truncated, "not a readable Parquet trace", id="truncated"),
        pytest.param(_random_bytes, "not a readable Parquet trace", id="random-bytes"),
        pytest.param(_empty, "not a readable Parquet trace", id="empty-file"),
        pytest.param(_text_named_parquet, "not a readable Parquet trace", id="text-file"),
        pytest.param(_directory, "a directory without trace parts", id="directory"),
        pytest.param(_missing, "no such file", id="missing"),
    ],
)
@pytest.mark.parametrize(
    "reader",
    [
        pytest.param(read_trace, id="read_trace"),
        pytest.param(lambda p: list(iter_trace(p)), id="iter_trace"),
        pytest.param(read_trace_metadata, id="read_trace_metadata"),
    ],
)
def test_bad_files_raise_trace_file_error_naming_the_path(
    make_bad, pattern: str, reader, tmp_path: Path, make_table
) -> None:
    path = make_bad(tmp_path / "t.parquet", make_table)
    with pytest.raises(TraceFileError, match=pattern) as info:
        reader(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, OSError)


@pytest.mark.parametrize(
    ("column", "values", "pattern"),
    [
        pytest.param(
            "timestamp", pa.array([1.5, 2.5]), r"column 'timestamp' has type double", id="float-timestamp"
        ),
        pytest.param("sender", pa.array([1, 2]), r"column 'sender' has type int64", id="int-sender"),
        pytest.param("id", pa.array([1, -2]), r"column 'id' holds negative value -2", id="negative-id"),
        pytest.param(
            "op",
            pa.array(["call", "cal"]),
            r"unknown op 'cal' \(must be one of call, return, send\)",
            id="unknown-op",
        ),
        pytest.param(
            "timestamp", pa.array([1, None], TS), r"column 'timestamp' has 1 null values", id="null-timestamp"
        ),
        pytest.param("receiver", None, r"missing column 'receiver'", id="missing-column"),
        pytest.param("colour", pa.array(["r", "g"]), r"unknown column 'colour'", id="unknown-column"),
    ],
)
def test_file_with_wrong_columns_raises_schema_error(
    column: str, values: pa.Array | None, pattern: str, tmp_path: Path, make_table
) -> None:
    table = make_table([(1, "call", "a", "b", 1), (2, "return", "b", "a", 1)])
    if values is None:
        table = table.drop_columns([column])
    elif column in table.column_names:
        table = table.set_column(table.schema.get_field_index(column), column, values)
    else:
        table = table.append_column(column, values)
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    with pytest.raises(SchemaError, match=pattern):
        read_trace(path)
    with pytest.raises(SchemaError, match=pattern):
        list(iter_trace(path))


def test_write_trace_validates(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    table = make_table([(1, "call", "a", "b", 1)]).append_column("colour", pa.array(["r"]))
    with pytest.raises(SchemaError, match="unknown column 'colour'"):
        write_trace(table, path)
    assert list(tmp_path.iterdir()) == []


# --- TraceWriter ---------------------------------------------------------------------------


def test_trace_writer_appends_pieces(tmp_path: Path, make_table, rows_of) -> None:
    rows = _sample_rows(25)
    path = tmp_path / "t.parquet"
    with TraceWriter(path, provenance={"step": 1}, row_group_size=10) as writer:
        for i in range(0, 25, 4):
            writer.write(make_table(rows[i : i + 4]))
        writer.provenance["final_count"] = writer.rows
        assert not path.exists()  # appears only when closed
    assert writer.rows == 25
    assert rows_of(read_trace(path)) == rows
    meta = read_trace_metadata(path)
    assert meta.provenance == {"step": 1, "final_count": 25}
    assert meta.row_groups == 3
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]


def test_trace_writer_without_writes_gives_empty_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    with TraceWriter(path):
        pass
    assert read_trace(path).num_rows == 0


def _write_pieces(path: Path, tables: list[pa.Table], fail: Exception | None = None) -> None:
    with TraceWriter(path, row_group_size=2) as writer:
        for table in tables:
            writer.write(table)
        if fail is not None:
            raise fail


def test_trace_writer_abort_leaves_nothing(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    with pytest.raises(RuntimeError, match="boom"):
        _write_pieces(path, [make_table(_sample_rows(5))], fail=RuntimeError("boom"))
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_trace_writer_rejects_changed_columns_and_leaves_nothing(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    pieces = [
        make_table([(1, "send", "a", "b", None)]),
        make_table([(2, "send", "a", "b", None)], bytes=pa.array([3], pa.uint64())),
    ]
    with pytest.raises(SchemaError, match="differ from the first write"):
        _write_pieces(path, pieces)
    assert not path.exists()
    assert list(tmp_path.iterdir()) == []


def test_trace_writer_invalid_table_leaves_nothing(tmp_path: Path, make_table) -> None:
    path = tmp_path / "t.parquet"
    pieces = [make_table(_sample_rows(5)), make_table([(2, "snd", "a", "b", None)])]
    with pytest.raises(SchemaError, match="unknown op 'snd'"):
        _write_pieces(path, pieces)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_existing_file(tmp_path: Path, make_table, rows_of) -> None:
    path = tmp_path / "t.parquet"
    old = [(1, "send", "a", "b", None)]
    write_trace(make_table(old), path)
    with pytest.raises(SchemaError):
        write_trace(make_table([(1, "oops", "a", "b", None)]), path)
    assert rows_of(read_trace(path)) == old


def test_a_damaged_page_is_an_error_not_altered_data(tmp_path: Path) -> None:
    # Pages carry checksums: 60 flipped bytes inside the timestamp column's first data
    # page are reported, never read back as other timestamps.
    import shutil

    import pyarrow.parquet as pq

    import synth

    good = tmp_path / "t.parquet"
    cfg = synth.load_config(Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml")
    from dataclasses import replace

    written = synth.generate_trace(replace(cfg, messages=20_000), good).messages
    column = pq.ParquetFile(good).metadata.row_group(0).column(0)
    assert column.path_in_schema == "timestamp"
    bad = tmp_path / "bad.parquet"
    shutil.copy(good, bad)
    data = bytearray(bad.read_bytes())
    for k in range(60):
        data[column.data_page_offset + 1000 + k] ^= 0x5A
    bad.write_bytes(bytes(data))
    with pytest.raises(TraceFileError, match="CRC checksum verification failed"):
        read_trace(bad)
    assert read_trace(good).num_rows == written
