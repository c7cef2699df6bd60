"""Merging traces from several capture points: offsets, renames, duplicate removal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import tracefmt.merge
from tracefmt import (
    CORE_COLUMNS,
    DEFAULT_DEDUP_WINDOW_NS,
    MergeInput,
    ParameterError,
    SchemaError,
    TraceFileError,
    load_names,
    merge_traces,
    read_trace,
    read_trace_metadata,
    rename_nodes,
    validate_trace,
    write_trace,
)

# A merged message as the tests compare it: (ts_ns, op, sender, receiver, id, point).
Out = tuple[int, str, str, str, int | None, str]


@pytest.fixture
def put(tmp_path: Path, make_table):
    """``put(name, rows, **extra)``: write a Parquet input and return its path as str."""

    def write(name: str, rows: list[tuple], **extra: object) -> str:
        path = tmp_path / name
        write_trace(make_table(rows, **extra), path)
        return str(path)

    return write


def merged(path: str | Path) -> list[Out]:
    t = read_trace(path)
    ts = t["timestamp"].cast(pa.int64()).to_pylist()
    cols = [t[n].to_pylist() for n in ("op", "sender", "receiver", "id", "point")]
    return [(a, *rest) for a, *rest in zip(ts, *cols, strict=True)]


def reference_merge(
    inputs: list[tuple[str, list[tuple], int]],
    window: int | None,
    names: dict[str, str] | None = None,
) -> tuple[list[Out], int]:
    """In-memory merge, written plainly: returns (rows, duplicates removed).

    ``inputs``: (point, rows, offset_ns). Rows are shifted, renamed, stably sorted by
    (timestamp, input index). Then, per key (sender, receiver, op, id), the rows in that
    order are cut into clusters wherever two consecutive rows are more than ``window``
    apart; in a cluster the k-th row of each input is the same message, of which the
    earliest (then the lowest input index) is kept and the others at most ``window``
    after it are copies.
    """
    names = names or {}
    rows = []
    for index, (point, rs, offset) in enumerate(inputs):
        for ts, op, s, r, i in rs:
            rows.append((ts + offset, index, (op, names.get(s, s), names.get(r, r), i), point))
    rows.sort(key=lambda x: (x[0], x[1]))  # stable: each input's own order kept
    if window is None:
        return [(ts, *key, point) for ts, _, key, point in rows], 0
    by_key: dict[tuple, list[int]] = {}
    for pos, (_, _, key, _) in enumerate(rows):
        by_key.setdefault(key, []).append(pos)
    copies: set[int] = set()
    for positions in by_key.values():
        clusters: list[list[int]] = []
        for pos in positions:
            if clusters and rows[pos][0] - rows[clusters[-1][-1]][0] <= window:
                clusters[-1].append(pos)
            else:
                clusters.append([pos])
        for cluster in clusters:
            seen: dict[int, int] = {}
            by_rank: dict[int, list[int]] = {}
            for pos in cluster:
                index = rows[pos][1]
                rank = seen.get(index, 0)
                seen[index] = rank + 1
                by_rank.setdefault(rank, []).append(pos)
            for group in by_rank.values():
                keep = min(group, key=lambda p: (rows[p][0], rows[p][1]))
                copies.update(p for p in group if p != keep and rows[p][0] - rows[keep][0] <= window)
    out = [(ts, *key, point) for pos, (ts, _, key, point) in enumerate(rows) if pos not in copies]
    return out, len(copies)


def test_reference_merge_itself() -> None:
    a = [(0, "send", "x", "y", 1), (10, "send", "x", "y", 1)]
    b = [(5, "send", "x", "y", 1), (6, "call", "x", "y", 1)]
    rows, removed = reference_merge([("a", a, 0), ("b", b, 0)], window=5)
    assert removed == 1
    assert rows == [
        (0, "send", "x", "y", 1, "a"),
        (6, "call", "x", "y", 1, "b"),
        (10, "send", "x", "y", 1, "a"),
    ]


# --- offsets, order, columns ---------------------------------------------------------------


def test_offsets_are_applied_exactly(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(1_000_000_000, "call", "c", "w", 1), (3_000_000_000, "return", "w", "c", 1)])
    b = put("b.parquet", [(1_000_000_007, "send", "x", "y", None), (2_500_000_000, "send", "y", "x", 2)])
    out = tmp_path / "m.parquet"
    report = merge_traces(
        [MergeInput(a, offset_ns=5), MergeInput(b, offset_ns=-12_000_000)], out, dedup_window_ns=None
    )
    assert merged(out) == [
        (988_000_007, "send", "x", "y", None, "b"),
        (1_000_000_005, "call", "c", "w", 1, "a"),
        (2_488_000_000, "send", "y", "x", 2, "b"),
        (3_000_000_005, "return", "w", "c", 1, "a"),
    ]
    assert report.messages == 4
    assert [i["offset_ns"] for i in report.inputs] == [5, -12_000_000]


def test_output_is_sorted_and_ties_follow_input_order(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(1, "send", "a", "b", 1), (5, "send", "a", "b", 2), (5, "send", "a", "b", 3)])
    b = put("b.parquet", [(0, "send", "c", "d", 1), (5, "send", "c", "d", 2), (9, "send", "c", "d", 3)])
    out = tmp_path / "m.parquet"
    merge_traces([a, b], out, dedup_window_ns=None)
    assert merged(out) == [
        (0, "send", "c", "d", 1, "b"),
        (1, "send", "a", "b", 1, "a"),
        (5, "send", "a", "b", 2, "a"),
        (5, "send", "a", "b", 3, "a"),
        (5, "send", "c", "d", 2, "b"),
        (9, "send", "c", "d", 3, "b"),
    ]


def test_point_column_from_file_name_or_input(put, tmp_path: Path) -> None:
    a = put("tap1.parquet", [(1, "send", "a", "b", 1)])
    b = put("tap2.parquet", [(2, "send", "a", "b", 2)])
    c = put("c.parquet", [(3, "send", "a", "b", 3), (4, "send", "a", "b", 4)], point=["inner", None])
    d = put("d.parquet", [(5, "send", "a", "b", 5)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b, c, MergeInput(d, point="edge")], out, dedup_window_ns=None)
    assert [r[5] for r in merged(out)] == ["tap1", "tap2", "inner", None, "edge"]
    assert [i["point"] for i in report.inputs] == ["tap1", "tap2", "c", "edge"]


def test_inputs_with_different_optional_columns(put, tmp_path: Path) -> None:
    a = put(
        "a.parquet",
        [(1, "send", "a", "b", 1), (3, "send", "a", "b", 2)],
        bytes=pa.array([10, 30], pa.uint64()),
    )
    b = put("b.parquet", [(2, "send", "c", "d", None)], proto=["dns"], x_tag=["t"])
    out = tmp_path / "m.parquet"
    merge_traces([a, b], out, dedup_window_ns=None)
    t = read_trace(out)
    assert t.column_names == [*CORE_COLUMNS, "bytes", "proto", "point", "x_tag"]
    assert t["bytes"].to_pylist() == [10, None, 30]
    assert t["proto"].to_pylist() == [None, "dns", None]
    assert t["x_tag"].to_pylist() == [None, "t", None]
    assert t["point"].to_pylist() == ["a", "b", "a"]
    assert t["bytes"].type == pa.uint64()
    assert t["proto"].type == pa.dictionary(pa.int32(), pa.string())


def test_single_input_is_copied(put, tmp_path: Path) -> None:
    rows = [(i, "send", "a", "b", i % 2) for i in range(6)]
    a = put("only.parquet", rows)
    out = tmp_path / "m.parquet"
    report = merge_traces([a], out)
    assert merged(out) == [(*r, "only") for r in rows]
    assert report.duplicates_removed == 0


def test_empty_inputs(put, tmp_path: Path) -> None:
    a = put("a.parquet", [])
    b = put("b.parquet", [(1, "send", "a", "b", 1)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out)
    assert merged(out) == [(1, "send", "a", "b", 1, "b")]
    assert [i["messages"] for i in report.inputs] == [0, 1]
    merge_traces([a], tmp_path / "e.parquet")
    assert read_trace(tmp_path / "e.parquet").num_rows == 0


# --- duplicates ----------------------------------------------------------------------------

W = 1_000  # dedup window used below, in ns


def test_duplicates_within_window_are_removed_and_only_those(put, tmp_path: Path) -> None:
    a_rows = [
        (1_000, "call", "client", "web", 1),  # copy in b 400 ns later -> b's copy removed
        (2_000, "send", "x", "y", 2),  # b has id 3: a different message
        (3_000, "call", "web", "db", 4),  # b has a return with id 4: different op
        (4_000, "send", "p", "q", 5),  # b has q -> p: different direction
        (5_000, "send", "m", "n", 6),  # b's copy is 1 ns outside the window
        (7_000, "send", "m", "n", 7),  # b's copy exactly at the window: removed
    ]
    b_rows = [
        (1_400, "call", "client", "web", 1),
        (2_050, "send", "x", "y", 3),
        (3_010, "return", "web", "db", 4),
        (4_010, "send", "q", "p", 5),
        (5_000 + W + 1, "send", "m", "n", 6),
        (7_000 + W, "send", "m", "n", 7),
    ]
    a, b = put("a.parquet", a_rows), put("b.parquet", b_rows)
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=W)
    got = merged(out)
    assert report.duplicates_removed == 2
    assert report.messages == len(got) == len(a_rows) + len(b_rows) - 2
    removed = {(1_400, "b"), (7_000 + W, "b")}
    expected = sorted(
        [(*r, "a") for r in a_rows] + [(*r, "b") for r in b_rows if (r[0], "b") not in removed],
        key=lambda x: x[0],
    )
    assert got == expected


def test_earliest_copy_survives(put, tmp_path: Path) -> None:
    # b saw the message first; a's later copy is the one dropped.
    a = put("a.parquet", [(500, "send", "s", "r", 9)])
    b = put("b.parquet", [(100, "send", "s", "r", 9)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=W)
    assert merged(out) == [(100, "send", "s", "r", 9, "b")]
    assert report.duplicates_removed == 1


def test_offset_decides_which_copy_is_earliest(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(500, "send", "s", "r", 9)])
    b = put("b.parquet", [(100, "send", "s", "r", 9)])
    out = tmp_path / "m.parquet"
    merge_traces([a, MergeInput(b, offset_ns=600)], out, dedup_window_ns=W)
    assert merged(out) == [(500, "send", "s", "r", 9, "a")]


def test_same_key_twice_in_one_input_is_never_removed(put, tmp_path: Path) -> None:
    rows = [
        (100, "send", "s", "r", 1),
        (100, "send", "s", "r", 1),
        (150, "send", "s", "r", None),
        (151, "send", "s", "r", None),
    ]
    a = put("a.parquet", rows)
    b = put("b.parquet", [(10_000, "send", "other", "r", 1)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=W)
    assert report.duplicates_removed == 0
    assert merged(out) == [*((*r, "a") for r in rows), (10_000, "send", "other", "r", 1, "b")]


def test_null_id_duplicates(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(100, "send", "s", "r", None), (5_000, "send", "s", "r", None)])
    b = put("b.parquet", [(200, "send", "s", "r", None), (5_100, "send", "s", "r", 0)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=W)
    # The null-id copy at 200 goes; id 0 is not the same as no id, so 5_100 stays.
    assert merged(out) == [
        (100, "send", "s", "r", None, "a"),
        (5_000, "send", "s", "r", None, "a"),
        (5_100, "send", "s", "r", 0, "b"),
    ]
    assert report.duplicates_removed == 1


def test_alternating_copies_pair_up(put, tmp_path: Path) -> None:
    # Two messages with one key, each seen at a then b: both b copies go.
    a = put("a.parquet", [(0, "send", "s", "r", None), (300, "send", "s", "r", None)])
    b = put("b.parquet", [(100, "send", "s", "r", None), (400, "send", "s", "r", None)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=W)
    assert merged(out) == [(0, "send", "s", "r", None, "a"), (300, "send", "s", "r", None, "a")]
    assert report.duplicates_removed == 2


def test_burst_of_same_key_seen_at_two_points_is_kept_once_each(put, tmp_path: Path) -> None:
    # Two distinct messages (same key, no id), 10 ns apart, each seen at both points,
    # b 50 ns after a: each must be kept once, so two messages remain.
    a = put("a.parquet", [(0, "send", "s", "r", None), (10, "send", "s", "r", None)])
    b = put("b.parquet", [(50, "send", "s", "r", None), (60, "send", "s", "r", None)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=W)
    assert merged(out) == [(0, "send", "s", "r", None, "a"), (10, "send", "s", "r", None, "a")]
    assert report.duplicates_removed == 2


@pytest.mark.parametrize("tail", [False, True], ids=["copies-read-in-turn", "copies-read-together"])
def test_message_seen_at_three_points_is_kept_once(tail: bool, put, tmp_path: Path) -> None:
    # With `tail`, every input also has a later message of its own (distinct ids), so
    # all three copies are buffered and compared at once; without, they are taken one
    # input at a time.
    def later(i: int) -> list[tuple]:
        return [(5_000, "send", "x", "y", i)] if tail else []

    a = put("a.parquet", [(0, "call", "client", "web", 7), *later(1)])
    b = put("b.parquet", [(100, "call", "client", "web", 7), *later(2)])
    c = put("c.parquet", [(200, "call", "client", "web", 7), *later(3)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b, c], out, dedup_window_ns=W)
    expected = [(0, "call", "client", "web", 7, "a")]
    if tail:
        expected += [(5_000, "send", "x", "y", i, p) for i, p in zip((1, 2, 3), "abc", strict=True)]
    assert merged(out) == expected
    assert report.duplicates_removed == 2


@pytest.mark.parametrize(
    ("window", "removed"),
    [(None, 0), (0, 1), (99, 1), (100, 2)],
    ids=["no-dedup", "window-0", "window-99", "window-100"],
)
def test_window_bounds(window: int | None, removed: int, put, tmp_path: Path) -> None:
    a = put("a.parquet", [(1_000, "send", "s", "r", 1), (2_000, "send", "s", "r", 2)])
    b = put("b.parquet", [(1_000, "send", "s", "r", 1), (2_100, "send", "s", "r", 2)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=window)
    assert report.duplicates_removed == removed
    assert report.messages == 4 - removed
    assert read_trace(out).num_rows == 4 - removed
    assert report.dedup_window_ns == window


def test_default_window() -> None:
    assert DEFAULT_DEDUP_WINDOW_NS == 1_000_000


# --- names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "toml",
    [
        pytest.param('"10.0.0.5:8080" = "WS1"\n"10.0.0.6" = "DB1"\n', id="top-level"),
        pytest.param('[names]\n"10.0.0.5:8080" = "WS1"\n"10.0.0.6" = "DB1"\n', id="names-table"),
    ],
)
def test_load_names(toml: str, tmp_path: Path) -> None:
    path = tmp_path / "names.toml"
    path.write_text(toml)
    assert load_names(path) == {"10.0.0.5:8080": "WS1", "10.0.0.6": "DB1"}


@pytest.mark.parametrize(
    ("toml", "pattern"),
    [
        pytest.param('"a" = \n', "not a valid TOML names file", id="bad-toml"),
        pytest.param('"a" = 5\n', "name for 'a' must be a non-empty string", id="integer-value"),
        pytest.param('"a" = ""\n', "name for 'a' must be a non-empty string", id="empty-value"),
        pytest.param('[names]\n"a" = ["x"]\n', "name for 'a' must be a non-empty string", id="list-value"),
        pytest.param('[other]\n"a" = "x"\n', "name for 'other' must be a non-empty string", id="other-table"),
    ],
)
def test_load_names_rejects_bad_files(toml: str, pattern: str, tmp_path: Path) -> None:
    path = tmp_path / "names.toml"
    path.write_text(toml)
    with pytest.raises(ParameterError, match=pattern) as info:
        load_names(path)
    assert str(path) in str(info.value)


def test_load_names_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "names.toml"
    path.write_bytes(b'"a" = "\xff"\n')
    with pytest.raises(ParameterError, match="not a valid TOML names file"):
        load_names(path)


def test_load_names_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceFileError, match="no such file"):
        load_names(tmp_path / "nope.toml")


def test_rename_nodes(make_table, rows_of) -> None:
    t = validate_trace(
        make_table([(1, "call", "10.0.0.5", "10.0.0.6", 1), (2, "return", "10.0.0.6", "x", 1)])
    )
    out = rename_nodes(t, {"10.0.0.5": "WS1", "10.0.0.6": "DB1", "unused": "U"})
    assert rows_of(out) == [(1, "call", "WS1", "DB1", 1), (2, "return", "DB1", "x", 1)]
    assert rename_nodes(t, {}) is t


def test_rename_two_addresses_to_one_name(make_table) -> None:
    t = validate_trace(make_table([(1, "send", "10.0.0.5", "b", None), (2, "send", "10.0.0.7", "b", None)]))
    out = rename_nodes(t, {"10.0.0.5": "WS1", "10.0.0.7": "WS1"})
    assert out["sender"].to_pylist() == ["WS1", "WS1"]
    assert out["sender"].chunk(0).dictionary.to_pylist() == ["WS1"]


def test_merge_renames_and_then_deduplicates(put, tmp_path: Path) -> None:
    names_file = tmp_path / "names.toml"
    names_file.write_text('[names]\n"10.0.0.5" = "WS1"\n"10.0.0.9" = "DB1"\n')
    names = load_names(names_file)
    # a knows addresses, b knows names: after renaming they saw the same message.
    a = put("a.parquet", [(100, "call", "10.0.0.5", "10.0.0.9", 3), (900, "send", "10.0.0.5", "z", None)])
    b = put("b.parquet", [(150, "call", "WS1", "DB1", 3)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, names=names, dedup_window_ns=W)
    assert merged(out) == [(100, "call", "WS1", "DB1", 3, "a"), (900, "send", "WS1", "z", None, "a")]
    assert report.duplicates_removed == 1
    assert report.renamed == {"10.0.0.5": "WS1", "10.0.0.9": "DB1"}


# --- bad input -----------------------------------------------------------------------------


def test_unsorted_input_is_refused(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(1, "send", "a", "b", 1)])
    b = put(
        "b.parquet",
        [
            (1, "send", "a", "b", 1),
            (2, "send", "a", "b", 2),
            (5, "send", "a", "b", 3),
            (3, "send", "a", "b", 4),
        ],
    )
    out = tmp_path / "m.parquet"
    with pytest.raises(SchemaError, match="--sort") as info:
        merge_traces([a, b], out)
    message = str(info.value)
    assert message.startswith(f"{b}: not sorted by timestamp at message 4")
    assert not out.exists()
    assert not any(p.name.endswith(".partial") for p in tmp_path.iterdir())


def test_unsorted_across_batches_is_refused(put, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracefmt.merge, "_BATCH", 2)
    a = put("a.parquet", [(1, "send", "a", "b", 1), (4, "send", "a", "b", 2), (3, "send", "a", "b", 3)])
    with pytest.raises(SchemaError, match=r"at message 3 .*--sort"):
        merge_traces([a], tmp_path / "m.parquet")


def test_missing_input(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(1, "send", "a", "b", 1)])
    missing = tmp_path / "missing.parquet"
    with pytest.raises(TraceFileError, match="no such file") as info:
        merge_traces([a, str(missing)], tmp_path / "m.parquet")
    assert str(missing) in str(info.value)
    assert not (tmp_path / "m.parquet").exists()


def test_no_inputs() -> None:
    with pytest.raises(ParameterError, match="at least one input"):
        merge_traces([], "m.parquet")


def test_negative_window(put, tmp_path: Path) -> None:
    a = put("a.parquet", [(1, "send", "a", "b", 1)])
    with pytest.raises(ParameterError, match="dedup window must be >= 0, not -1 ns"):
        merge_traces([a], tmp_path / "m.parquet", dedup_window_ns=-1)


def test_output_must_not_be_an_input(put) -> None:
    a = put("a.parquet", [(1, "send", "a", "b", 1)])
    with pytest.raises(ParameterError, match="would overwrite an input"):
        merge_traces([a], a)
    assert read_trace(a).num_rows == 1


# --- provenance ----------------------------------------------------------------------------


def test_provenance_records_inputs_offsets_window_and_duplicates(put, tmp_path: Path, make_table) -> None:
    a_path = tmp_path / "a.parquet"
    write_trace(
        make_table([(0, "send", "s", "r", 1), (10, "send", "s", "r", 2)]),
        a_path,
        provenance={"capture": "eth0"},
    )
    a = str(a_path)
    b = put("b.parquet", [(-95, "send", "s", "r", 1)])
    out = tmp_path / "m.parquet"
    report = merge_traces(
        [MergeInput(a), MergeInput(b, offset_ns=100)], out, names={"s": "S"}, dedup_window_ns=50
    )
    prov = read_trace_metadata(out).provenance
    assert prov["merge"] == report.to_json()
    m = prov["merge"]
    assert m["output"] == str(out)
    assert m["messages"] == 2
    assert m["duplicates_removed"] == 1
    assert m["dedup_window_ns"] == 50
    assert m["renamed"] == {"s": "S"}
    assert [(i["path"], i["messages"], i["offset_ns"], i["point"]) for i in m["inputs"]] == [
        (a, 2, 0, "a"),
        (b, 1, 100, "b"),
    ]
    assert m["inputs"][0]["provenance"] == {"capture": "eth0"}
    assert merged(out) == [(0, "send", "S", "r", 1, "a"), (10, "send", "S", "r", 2, "a")]


def test_progress_reaches_total(put, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracefmt.merge, "_BATCH", 3)
    a = put("a.parquet", [(i, "send", "a", "b", i) for i in range(0, 20, 2)])
    b = put("b.parquet", [(i, "send", "c", "d", i) for i in range(1, 20, 2)])
    seen: list[int] = []
    merge_traces([a, b], tmp_path / "m.parquet", on_progress=seen.append)
    assert len(seen) > 1
    assert seen == sorted(seen)
    assert seen[-1] == 20


# --- small internal batches against the in-memory reference --------------------------------


def _capture(seed: int, points: int, n: int, window: int, ties: bool) -> list[list[tuple]]:
    """Messages seen at several points with small lags; returns each point's sorted rows."""
    rng = np.random.default_rng(seed)
    if ties:
        base = np.sort(rng.integers(0, n * 3, n))  # many equal timestamps
        lag_hi = window + 3
    else:
        base = np.arange(n) * 1_000 * points  # unique times, unique lags per point
        lag_hi = None
    keys = [
        ("send", "s", "r", None),
        ("send", "s", "r", 1),
        ("call", "c", "w", 2),
        ("return", "w", "c", 2),
        ("send", "r", "s", None),
    ]
    seen: list[list[tuple]] = [[] for _ in range(points)]
    for k in range(n):
        op, s, r, i = keys[int(rng.integers(len(keys)))]
        for p in range(points):
            if rng.random() < 0.6:
                lag = (
                    int(rng.integers(0, lag_hi))
                    if lag_hi
                    else p * 7 + int(rng.integers(0, 2)) * (window + 100)
                )
                seen[p].append((int(base[k]) + lag, op, s, r, i))
    return [sorted(rows, key=lambda x: x[0]) for rows in seen]


SCENARIOS = [
    pytest.param(dict(points=2, ties=False, offsets=(0, 0)), id="2-points-distinct-times"),
    pytest.param(dict(points=2, ties=True, offsets=(0, 0)), id="2-points-equal-times"),
    pytest.param(dict(points=3, ties=False, offsets=(0, 0, 0)), id="3-points-distinct-times"),
    pytest.param(dict(points=3, ties=True, offsets=(5, -3, 0)), id="3-points-equal-times-offsets"),
]


@pytest.mark.parametrize("batch", [1 << 18, 7, 2], ids=["one-batch", "batch7", "batch2"])
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("seed", [11, 12, 13])
def test_merge_matches_reference(
    seed: int, scenario: dict, batch: int, tmp_path: Path, make_table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracefmt.merge, "_BATCH", batch)
    window = 10
    points = scenario["points"]
    per_point = _capture(seed, points, 40, window, scenario["ties"])
    specs, ref_inputs = [], []
    for p, rows in enumerate(per_point):
        path = tmp_path / f"p{p}.parquet"
        write_trace(make_table(rows), path)
        specs.append(MergeInput(str(path), offset_ns=scenario["offsets"][p]))
        ref_inputs.append((f"p{p}", rows, scenario["offsets"][p]))
    out = tmp_path / "m.parquet"
    report = merge_traces(specs, out, dedup_window_ns=window)
    expected, removed = reference_merge(ref_inputs, window)
    assert removed > 0  # the scenario does exercise duplicate removal
    got = merged(out)
    assert got == expected
    assert report.duplicates_removed == removed
    assert report.messages == sum(len(r) for r in per_point) - removed


@pytest.mark.parametrize("batch", [1 << 18, 2], ids=["one-batch", "batch2"])
def test_dropped_copy_is_remembered_across_batches(
    batch: int, put, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a saw K once (t=0); b saw K twice (t=1, t=3). b@1 is a's copy; b@3 is a second
    # message only b saw, and must stay whatever the internal batch size.
    monkeypatch.setattr(tracefmt.merge, "_BATCH", batch)
    a = put("a.parquet", [(0, "send", "k", "k", 1), (5, "send", "y", "y", 9)])
    b = put(
        "b.parquet",
        [
            (1, "send", "k", "k", 1),
            (2, "send", "x", "x", 9),
            (3, "send", "k", "k", 1),
            (4, "send", "z", "z", 9),
        ],
    )
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=10)
    assert merged(out) == [
        (0, "send", "k", "k", 1, "a"),
        (2, "send", "x", "x", 9, "b"),
        (3, "send", "k", "k", 1, "b"),
        (4, "send", "z", "z", 9, "b"),
        (5, "send", "y", "y", 9, "a"),
    ]
    assert report.duplicates_removed == 1


@pytest.mark.parametrize("batch", [1 << 18, 2], ids=["one-batch", "batch2"])
def test_equal_timestamps_at_a_batch_boundary(
    batch: int, put, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a's first batch ends at t=5 and its next batch starts at t=5 with K; b saw K at t=5 too.
    monkeypatch.setattr(tracefmt.merge, "_BATCH", batch)
    a = put(
        "a.parquet",
        [
            (0, "send", "q", "q", 1),
            (5, "send", "q", "q", 2),
            (5, "send", "k", "k", 1),
            (9, "send", "q", "q", 3),
        ],
    )
    b = put("b.parquet", [(5, "send", "k", "k", 1), (6, "send", "w", "w", 1), (7, "send", "w", "w", 2)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=10)
    assert merged(out) == [
        (0, "send", "q", "q", 1, "a"),
        (5, "send", "q", "q", 2, "a"),
        (5, "send", "k", "k", 1, "a"),  # the tie goes to the first input
        (6, "send", "w", "w", 1, "b"),
        (7, "send", "w", "w", 2, "b"),
        (9, "send", "q", "q", 3, "a"),
    ]
    assert report.duplicates_removed == 1


def test_rank_partner_beyond_the_window_is_not_a_copy(put, tmp_path: Path) -> None:
    # a saw K at 0 and 10, b saw K at 15 (window 10): one cluster, and b@15 is a's first
    # row's rank partner, but 15 ns after it: b@15 is a message of its own.
    a = put("a.parquet", [(0, "send", "k", "k", 1), (10, "send", "k", "k", 1)])
    b = put("b.parquet", [(15, "send", "k", "k", 1)])
    out = tmp_path / "m.parquet"
    report = merge_traces([a, b], out, dedup_window_ns=10)
    assert report.duplicates_removed == 0
    assert [r[0] for r in merged(out)] == [0, 10, 15]
