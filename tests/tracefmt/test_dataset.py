"""A trace written as a partitioned Parquet dataset: layout, atomicity, every reader
(wirepath's, DuckDB, pandas, Dask) and the CLI."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import tracefmt
from tracefmt import (
    ParameterError,
    Partitioning,
    SchemaError,
    TraceFileError,
    TraceWriter,
    iter_any_trace,
    iter_trace,
    read_any_trace,
    read_trace,
    read_trace_metadata,
    summarize_trace,
    trace_parts,
    validate_trace,
    write_trace,
)
from wirepath.cli import main

HOUR = 3_600_000_000_000
#: 2024-05-01T10:20:00Z: the trace starts in the middle of an hour.
START = 1_714_558_800_000_000_000
NODES = np.array(["client", "WS1", "WS2", "AP1", "DB1"])
OPS = np.array(["call", "return", "send"])


def synthetic(n: int = 20_000, hours: float = 4.5, seed: int = 7) -> pa.Table:
    """A validated, time-sorted trace over ``hours`` from ``START``, with optional columns."""
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(START, START + int(hours * HOUR), n))
    ids = rng.integers(0, 2**40, n).astype(np.uint64)
    return validate_trace(
        pa.table(
            {
                "timestamp": pa.array(ts, pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
                "sender": NODES[rng.integers(0, len(NODES), n)],
                "receiver": NODES[rng.integers(0, len(NODES), n)],
                "op": OPS[rng.integers(0, 3, n)],
                "id": pa.array(ids, pa.uint64(), mask=rng.random(n) < 0.1),
                "bytes": pa.array(rng.integers(0, 5000, n), pa.uint64()),
                "label": np.array(["GET /a", "GET /b", "POST /c"])[rng.integers(0, 3, n)],
            }
        )
    )


def _times(table: pa.Table) -> np.ndarray:
    return table["timestamp"].cast(pa.int64()).to_numpy()


def _edge_counts(table: pa.Table) -> dict[tuple[str, str], int]:
    plain = pa.table(
        {"sender": table["sender"].cast(pa.string()), "receiver": table["receiver"].cast(pa.string())}
    )
    counts = plain.group_by(["sender", "receiver"]).aggregate([([], "count_all")])
    return {
        (s, r): c
        for s, r, c in zip(
            counts["sender"].to_pylist(),
            counts["receiver"].to_pylist(),
            counts["count_all"].to_pylist(),
            strict=True,
        )
    }


@pytest.fixture(scope="module")
def trace() -> pa.Table:
    return synthetic()


# --- partitioning ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("5M", Partitioning(messages=5_000_000)),
        ("500K", Partitioning(messages=500_000)),
        ("500k", Partitioning(messages=500_000)),
        ("2.5M", Partitioning(messages=2_500_000)),
        ("1G", Partitioning(messages=1_000_000_000)),
        ("1000", Partitioning(messages=1000)),
        ("1h", Partitioning(span_ns=HOUR)),
        ("30min", Partitioning(span_ns=HOUR // 2)),
        ("10s", Partitioning(span_ns=10_000_000_000)),
        ("1.5ms", Partitioning(span_ns=1_500_000)),
    ],
)
def test_partitioning_parse(text: str, expected: Partitioning) -> None:
    assert Partitioning.parse(text) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("5m", "ambiguous"),
        ("0", "whole number >= 1"),
        ("1.5K5", "invalid partition"),
        ("0.5", "whole number"),
        ("1.0001K", "whole number"),
        ("0h", "at least 1 ns"),
        ("-1h", "must not be negative"),
        ("1 fortnight", "invalid partition"),
        ("", "invalid partition"),
    ],
)
def test_partitioning_parse_refuses(text: str, reason: str) -> None:
    with pytest.raises(ParameterError, match=reason):
        Partitioning.parse(text)


def test_partitioning_needs_exactly_one_size() -> None:
    with pytest.raises(ParameterError, match="either"):
        Partitioning()
    with pytest.raises(ParameterError, match="either"):
        Partitioning(messages=1, span_ns=1)
    with pytest.raises(ParameterError, match="positive integer"):
        Partitioning(messages=0)
    with pytest.raises(ParameterError, match="a Partitioning or a string"):
        TraceWriter("x", partition=5)  # type: ignore[arg-type]  # messages or nanoseconds?


# --- layout ---------------------------------------------------------------------------------


def test_dataset_by_messages(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    write_trace(trace, out, partition="6K", provenance={"source": "synthetic"})
    parts = trace_parts(out)
    assert [p.name for p in parts] == [f"part-{i:05d}.parquet" for i in range(4)]
    assert sorted(p.name for p in out.iterdir()) == ["_common_metadata", *(p.name for p in parts)]
    assert [pq.ParquetFile(p).metadata.num_rows for p in parts] == [6000, 6000, 6000, 2000]
    start = 0
    for part in parts:  # each part is the next slice of the trace, a trace file of its own
        table = read_trace(part)
        assert table.equals(trace.slice(start, table.num_rows))
        meta = read_trace_metadata(part)
        assert meta.schema_version == tracefmt.SCHEMA_VERSION
        assert meta.provenance == {"source": "synthetic"}
        start += table.num_rows


def test_dataset_by_hour(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    write_trace(trace, out, partition="1h")
    parts = trace_parts(out)
    # 10:20 to 14:50: five clock hours, each a part covering [k h, (k + 1) h).
    assert len(parts) == 5
    ts = _times(trace)
    hours = ts // HOUR
    for part, hour in zip(parts, np.unique(hours), strict=True):
        t = _times(read_trace(part))
        assert len(t) == int((hours == hour).sum())
        assert hour * HOUR <= t.min()
        assert t.max() < (hour + 1) * HOUR
        # The footer's statistics say so too: what a query engine prunes parts by.
        stats = pq.ParquetFile(part).metadata.row_group(0).column(0).statistics
        assert stats.has_min_max
    assert (_times(read_trace(parts[0])).min(), _times(read_trace(parts[-1])).max()) == (ts.min(), ts.max())


def test_hour_parts_skip_empty_hours_and_times_before_1970(tmp_path: Path, make_table) -> None:
    rows = [(-HOUR - 1, "send", "a", "b", None), (-1, "send", "a", "b", None), (0, "send", "b", "a", 1)]
    rows.append((5 * HOUR, "send", "a", "b", 2))
    write_trace(make_table(rows), tmp_path / "ds", partition="1h")
    assert [_times(read_trace(p)).tolist() for p in trace_parts(tmp_path / "ds")] == [
        [-HOUR - 1],
        [-1],
        [0],
        [5 * HOUR],
    ]


def test_write_trace_sorts_a_dataset(tmp_path: Path, trace: pa.Table) -> None:
    shuffled = trace.take(np.random.default_rng(1).permutation(trace.num_rows))
    write_trace(shuffled, tmp_path / "ds", partition="1h")
    assert read_trace(tmp_path / "ds").num_rows == trace.num_rows
    assert np.all(np.diff(_times(read_trace(tmp_path / "ds"))) >= 0)


def test_trace_writer_streams_into_parts(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    with TraceWriter(out, partition=Partitioning(messages=3000), row_group_size=1000) as w:
        for batch in trace.to_batches(max_chunksize=1234):
            w.write(batch)
        assert w.parts == 7
    assert w.rows == trace.num_rows
    assert [pq.ParquetFile(p).metadata.num_row_groups for p in trace_parts(out)] == [3] * 6 + [2]
    assert read_trace(out).equals(trace)


def test_stream_out_of_time_order_is_refused(tmp_path: Path, trace: pa.Table) -> None:
    w = TraceWriter(tmp_path / "ds", partition="1h")
    w.write(trace.slice(1000, 10))
    with pytest.raises(SchemaError, match=r"not in time order .*\(wirepath convert --sort\)"):
        w.write(trace.slice(0, 10))
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_changed_columns_are_refused(tmp_path: Path, trace: pa.Table) -> None:
    w = TraceWriter(tmp_path / "ds", partition="1K")
    w.write(trace.slice(0, 10))
    with pytest.raises(SchemaError, match="same schema"):
        w.write(trace.slice(10, 10).drop_columns(["label"]))
    w.abort()
    assert list(tmp_path.iterdir()) == []


def test_provenance_set_at_the_end_reaches_every_part(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    with TraceWriter(out, partition="5K", provenance={"source": "x"}) as w:
        w.write(trace)
        w.provenance["skipped_lines"] = 3  # a count known only once the input is read
    for part in trace_parts(out):
        assert read_trace_metadata(part).provenance == {"source": "x", "skipped_lines": 3}
    assert read_trace(out).equals(trace)


def test_empty_dataset_has_one_part_with_the_columns(tmp_path: Path, trace: pa.Table) -> None:
    write_trace(trace.slice(0, 0), tmp_path / "ds", partition="1h")
    assert [p.name for p in trace_parts(tmp_path / "ds")] == ["part-00000.parquet"]
    empty = read_trace(tmp_path / "ds")
    assert empty.num_rows == 0
    assert empty.column_names == trace.column_names


def test_common_metadata_has_the_schema_and_is_no_part(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    write_trace(trace, out, partition="1h", provenance={"source": "x"})
    schema = pq.read_schema(out / "_common_metadata")
    assert schema.remove_metadata().equals(trace.schema.remove_metadata())
    doc = json.loads(schema.metadata[b"wirepath"])
    assert doc == {"schema_version": tracefmt.SCHEMA_VERSION, "provenance": {"source": "x"}}
    assert all(p.name.startswith("part-") for p in trace_parts(out))


# --- reading a dataset with wirepath --------------------------------------------------------


def test_every_reader_takes_a_dataset(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    write_trace(trace, out, partition="1h", provenance={"source": "x"})
    assert read_trace(out).equals(trace)
    assert read_any_trace(out).equals(trace)
    assert read_trace(out, columns=["bytes"]).column_names == [*tracefmt.CORE_COLUMNS, "bytes"]
    assert pa.concat_tables(iter_trace(out, batch_size=999)).equals(trace)
    assert pa.concat_tables(iter_any_trace(out)).equals(trace)
    meta = read_trace_metadata(out)
    assert (meta.messages, meta.schema_version, meta.provenance) == (trace.num_rows, 1, {"source": "x"})
    summary = summarize_trace(out)
    assert summary.messages == trace.num_rows
    assert summary.edges == _edge_counts(trace)
    assert summary.columns == ["bytes", "label"]


# --- other tools read it directly -----------------------------------------------------------


def test_duckdb_reads_the_dataset(tmp_path: Path, trace: pa.Table) -> None:
    duckdb = pytest.importorskip("duckdb")
    out = tmp_path / "ds"
    write_trace(trace, out, partition="1h")
    got = duckdb.sql(
        "SELECT sender, receiver, count(*) AS n, epoch_ns(min(timestamp)) AS t0 "
        f"FROM read_parquet('{out}/*.parquet') GROUP BY sender, receiver"
    ).fetchall()
    assert {(s, r): n for s, r, n, _ in got} == _edge_counts(trace)
    assert min(t0 for *_, t0 in got) == _times(trace)[0]


# Dask's Parquet reader calls a pandas method deprecated in pandas 3.1.
@pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning")
def test_pandas_and_dask_read_the_dataset(tmp_path: Path, trace: pa.Table) -> None:
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    out = tmp_path / "ds"
    write_trace(trace, out, partition="6K")
    expected = trace.to_pandas()
    for frame in (pd.read_parquet(out), dd.read_parquet(str(out)).compute()):
        frame = frame.sort_values("timestamp", kind="stable").reset_index(drop=True)
        assert len(frame) == trace.num_rows
        assert (frame["timestamp"] == expected["timestamp"]).all()
        assert (frame["sender"].astype(str) == expected["sender"].astype(str)).all()
        assert frame["bytes"].sum() == pc.sum(trace["bytes"]).as_py()


# --- atomicity ------------------------------------------------------------------------------


def _fail_on_second_part(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make writing the second part's data fail as on a full disk."""

    class FullDisk(pq.ParquetWriter):
        def __init__(self, where: object, *args: object, **kwargs: object) -> None:
            self.target = str(where)
            super().__init__(where, *args, **kwargs)

        def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
            if "part-00001" in self.target:
                raise OSError(errno.ENOSPC, "No space left on device")
            super().write_table(table, row_group_size)

    monkeypatch.setattr(tracefmt.parquet.pq, "ParquetWriter", FullDisk)


def test_crash_mid_write_leaves_nothing(
    tmp_path: Path, trace: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fail_on_second_part(monkeypatch)
    with pytest.raises(TraceFileError, match="disk is full"):
        write_trace(trace, tmp_path / "ds", partition="6K")
    assert list(tmp_path.iterdir()) == []


def test_crash_mid_write_keeps_the_earlier_dataset(
    tmp_path: Path, trace: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ds"
    write_trace(trace.slice(0, 100), out, partition="1h")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _fail_on_second_part(monkeypatch)
    with pytest.raises(TraceFileError):
        write_trace(trace, out, partition="6K")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_interrupt_while_publishing_keeps_the_earlier_dataset(
    tmp_path: Path, trace: pa.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ds"
    write_trace(trace.slice(0, 100), out, partition="1h")
    real = os.replace

    def replace(src: Path, dst: Path) -> None:
        if Path(dst) == out and Path(src).name.endswith(".partial"):
            raise KeyboardInterrupt  # between the two renames: the old dataset is aside
        real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        write_trace(trace, out, partition="6K")
    assert read_trace(out).equals(trace.slice(0, 100))
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_a_complete_dataset_replaces_the_earlier_one(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "ds"
    write_trace(trace, out, partition="2K")  # ten parts
    write_trace(trace, out, partition="1h")  # five: none of the old ones may stay
    assert len(trace_parts(out)) == 5
    assert read_trace(out).equals(trace)
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


def test_leftovers_of_a_killed_run_are_not_taken(tmp_path: Path, trace: pa.Table) -> None:
    # Temporaries nobody holds a lock on: their writer was killed.
    stale = tmp_path / ".ds.k1ll3d_1.partial"
    stale.mkdir()
    write_trace(trace.slice(0, 5), stale / "part-00007.parquet")
    (tmp_path / ".ds.k1ll3d_1.replaced").mkdir()
    write_trace(trace, tmp_path / "ds", partition="1h")
    assert read_trace(tmp_path / "ds").equals(trace)
    assert [p.name for p in tmp_path.iterdir()] == ["ds"]


# --- refusals -------------------------------------------------------------------------------


def test_a_directory_with_other_files_is_refused(tmp_path: Path, trace: pa.Table) -> None:
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(TraceFileError, match=r"holds notes\.txt, which is not part of a trace dataset"):
        write_trace(trace, out, partition="1h")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["results"]


def test_an_empty_directory_is_taken(tmp_path: Path, trace: pa.Table) -> None:
    (tmp_path / "ds").mkdir()
    write_trace(trace, tmp_path / "ds", partition="1h")
    assert read_trace(tmp_path / "ds").equals(trace)


def test_a_file_is_not_replaced_by_a_dataset(tmp_path: Path, trace: pa.Table) -> None:
    write_trace(trace, tmp_path / "t.parquet")
    with pytest.raises(TraceFileError, match="is a file"):
        write_trace(trace, tmp_path / "t.parquet", partition="1h")
    assert read_trace(tmp_path / "t.parquet").equals(trace)


def test_too_many_parts_are_refused(tmp_path: Path, make_table, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracefmt.parquet, "MAX_PARTS", 3)
    rows = [(i, "send", "a", "b", None) for i in range(4)]
    with pytest.raises(ParameterError, match="more than 3 parts of 1 messages"):
        write_trace(make_table(rows), tmp_path / "ds", partition="1")
    assert list(tmp_path.iterdir()) == []


# --- command line ---------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_convert_partition(tmp_path: Path, trace: pa.Table, capsys: pytest.CaptureFixture[str]) -> None:
    write_trace(trace, tmp_path / "t.parquet", provenance={"capture": "x"})
    rc, out, err = run(
        capsys, "convert", tmp_path / "t.parquet", "--out", tmp_path / "ds", "--partition", "1h"
    )
    assert (rc, err) == (0, "")
    assert out.strip() == f"wrote {trace.num_rows:,} messages to {tmp_path / 'ds'} in 5 parts of at most 1 h"
    assert read_trace(tmp_path / "ds").equals(trace)
    assert read_trace_metadata(tmp_path / "ds").provenance["capture"] == "x"
    # Back to one file, and a dataset into a dataset by messages.
    rc, out, _ = run(capsys, "convert", "--json", tmp_path / "ds", tmp_path / "ds2", "--partition", "5K")
    assert rc == 0
    assert json.loads(out)["parts"] == 4
    rc, _, _ = run(capsys, "convert", tmp_path / "ds2", tmp_path / "back.parquet")
    assert rc == 0
    assert read_trace(tmp_path / "back.parquet").equals(trace)
    rc, out, _ = run(capsys, "info", "--json", tmp_path / "ds2")
    assert (rc, json.loads(out)["messages"]) == (0, trace.num_rows)


def test_cli_convert_text_to_dataset_needs_time_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "in.txt").write_text("3 send a b 1\n1 send a b 2\n7200 send b a 3\n")
    rc, _, err = run(capsys, "convert", tmp_path / "in.txt", "--out", tmp_path / "ds", "--partition", "1h")
    assert rc == 1
    assert "not in time order" in err
    assert "wirepath convert --sort" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]
    rc, out, _ = run(
        capsys, "convert", "--sort", tmp_path / "in.txt", "--out", tmp_path / "ds", "--partition", "1h"
    )
    assert rc == 0
    assert "in 2 parts" in out
    assert [read_trace(p).num_rows for p in trace_parts(tmp_path / "ds")] == [2, 1]


@pytest.mark.parametrize(
    ("argv", "starts"),
    [
        (["--partition", "5m"], "partition '5m' is ambiguous"),
        (["--partition", "soon"], "invalid partition"),
        (["--out", "other"], "give OUTPUT"),
    ],
)
def test_cli_convert_partition_errors(
    argv: list[str], starts: str, tmp_path: Path, trace: pa.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    write_trace(trace.slice(0, 10), tmp_path / "t.parquet")
    rc, _, err = run(capsys, "convert", tmp_path / "t.parquet", tmp_path / "ds", *argv)
    assert rc == 1
    assert err.startswith(f"error: {starts}"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet"]


def test_cli_convert_refuses_to_replace_its_input(
    tmp_path: Path, trace: pa.Table, capsys: pytest.CaptureFixture[str]
) -> None:
    write_trace(trace, tmp_path / "ds", partition="1h")
    rc, _, err = run(
        capsys, "convert", tmp_path / "ds" / "part-00000.parquet", tmp_path / "ds", "--partition", "1K"
    )
    assert rc == 1
    assert "would replace the input" in err
    assert len(trace_parts(tmp_path / "ds")) == 5


def test_cli_capture_pcap_partition(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pcap = Path(__file__).parents[2] / "samples" / "testbed" / "web.pcap"
    if not pcap.exists():
        pytest.skip("no sample capture")
    rc, _, _ = run(capsys, "capture", "pcap", pcap, "--out", tmp_path / "one.parquet")
    assert rc == 0
    rc, _, err = run(capsys, "capture", "pcap", pcap, "--out", tmp_path / "ds", "--partition", "100")
    assert (rc, err) == (0, "")
    one = read_trace(tmp_path / "one.parquet")
    assert read_trace(tmp_path / "ds").equals(one)
    parts = trace_parts(tmp_path / "ds")
    assert len(parts) == -(-one.num_rows // 100)
    # The capture statistics, known only at the end, are in every part.
    prov = read_trace_metadata(tmp_path / "one.parquet").provenance["capture"]
    for part in parts:
        got = read_trace_metadata(part).provenance["capture"]
        assert {k: v for k, v in got.items() if k != "seconds"} == {
            k: v for k, v in prov.items() if k != "seconds"
        }


@pytest.mark.parametrize("partition", ["1h", None])
def test_a_second_close_changes_nothing(tmp_path: Path, trace: pa.Table, partition: str | None) -> None:
    out = tmp_path / ("ds" if partition else "t.parquet")
    w = TraceWriter(out, partition=partition)
    w.write(trace)
    w.close()
    w.close()
    w.abort()
    assert read_trace(out).equals(trace)
