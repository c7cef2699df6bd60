"""``write_export`` writes its JSON a batch of spans at a time: the file is byte for byte
``json.dumps`` of the whole document (``export_traces``, whose shape test_export.py
checks against each format's definition) whatever the batch size, its memory is a
batch's and not the document's, and it stays atomic when a batch fails."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import infer
import viz.export as export
from viz.export import EXPORT_FORMATS, export_traces, write_export
from wirepath.cli import main


def _whole_json(table: pa.Table, fmt: str, max_traces: int | None = None) -> bytes:
    """The file as it was written before streaming: the whole document, dumped at once."""
    doc = export_traces(table, fmt, max_traces=max_traces)
    return (json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n").encode()


def _spans(doc: Any, fmt: str) -> list[tuple[str, str, str | None, str]]:
    """(trace id, span id, parent id, service) of each span of a document."""
    if fmt == "zipkin":
        return [(s["traceId"], s["id"], s.get("parentId"), s["localEndpoint"]["serviceName"]) for s in doc]
    if fmt == "jaeger":
        return [
            (
                s["traceID"],
                s["spanID"],
                s["references"][0]["spanID"] if s["references"] else None,
                t["processes"][s["processID"]]["serviceName"],
            )
            for t in doc["data"]
            for s in t["spans"]
        ]
    return [
        (
            s["traceId"],
            s["spanId"],
            s.get("parentSpanId"),
            rs["resource"]["attributes"][0]["value"]["stringValue"],
        )
        for rs in doc["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]


def _tables(runs: dict[str, Any]) -> dict[str, pa.Table]:
    slow = runs["slow"]["result"].instances_table()
    base = runs["base"]["result"].instances_table()
    shuffle = pa.array(np.random.default_rng(1).permutation(base.num_rows))
    names = {n: f'{n} "é\\\x1b' for n in set(slow["caller"].to_pylist() + slow["callee"].to_pylist())}
    renamed = slow
    for column in ("caller", "callee"):
        values = pa.array([names[n] for n in slow[column].to_pylist()])
        renamed = renamed.set_column(renamed.column_names.index(column), column, values)
    # Two roots in one instance: one trace with two client spans (the table allows it).
    two_roots = pa.table(
        {
            "pair": [0, 1, 2, 3],
            "caller": ["c", "w", "c", "x"],
            "callee": ["w", "d", "x", "y"],
            "t_call": pa.array([0, 10, 5, 6], pa.timestamp("ns")),
            "t_return": pa.array([30, 20, 25, 7], pa.timestamp("ns")),
            "parent": pa.array([None, 0, None, 2], pa.int64()),
            "instance": [0, 0, 0, 0],
            "pattern": ["p"] * 4,
            "confidence": [1.0, 0.9, 1.0, 0.5],
        }
    )
    return {
        "slow": slow,
        "base, rows shuffled, many chunks": pa.Table.from_batches(base.take(shuffle).to_batches(300)),
        "odd names, no optional columns": renamed.drop_columns(["pattern_confidence", "candidates"]),
        "confident only": infer.confident_instances(slow, 0.9)[0],
        "empty": slow.slice(0, 0),
        "two roots in one instance": two_roots,
    }


@pytest.fixture(scope="module")
def tables(runs: dict[str, Any]) -> dict[str, pa.Table]:
    return _tables(runs)


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize(
    "name",
    [
        "slow",
        "base, rows shuffled, many chunks",
        "odd names, no optional columns",
        "confident only",
        "empty",
        "two roots in one instance",
    ],
)
def test_the_streamed_file_is_the_whole_document(
    tables: dict[str, pa.Table], name: str, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first 400 requests whole (every shape of the full table; a tenth of its size).
    table = tables[name]
    if table.num_rows:
        first = np.unique(table["instance"].to_numpy())[:400]
        table = table.filter(pa.array(np.isin(table["instance"].to_numpy(), first)))
    for max_traces in (None, 1, 29):
        monkeypatch.setattr(export, "BATCH_SPANS", 10**9)  # one batch: the document built whole
        want = _whole_json(table, fmt, max_traces)
        # A batch of one span for a few traces only: thousands of batches are slow.
        for batch in (1, 7, 4096) if max_traces else (7, 4096):
            monkeypatch.setattr(export, "BATCH_SPANS", batch)
            out = tmp_path / f"{batch}.json"
            counts = write_export(table, fmt, out, max_traces=max_traces)
            assert out.read_bytes() == want, (max_traces, batch)
            spans = _spans(json.loads(out.read_bytes()), fmt)
            assert counts == {"traces": len({s[0] for s in spans}), "spans": len(spans)}
            # Every parent is a span of the same trace; span ids are unique per trace.
            ids = {(s[0], s[1]) for s in spans}
            assert len(ids) == len(spans)
            assert all((s[0], s[2]) in ids for s in spans if s[2] is not None)


def test_otlp_keeps_one_resource_per_service_in_name_order(
    tables: dict[str, pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(export, "BATCH_SPANS", 3)
    table = tables["odd names, no optional columns"]
    write_export(table, "otlp", tmp_path / "o.json")
    doc = json.loads((tmp_path / "o.json").read_text())
    services = [rs["resource"]["attributes"][0]["value"]["stringValue"] for rs in doc["resourceSpans"]]
    assert services == sorted(set(services))
    # Each visit is a server span of its callee.
    server = Counter(
        rs["resource"]["attributes"][0]["value"]["stringValue"]
        for rs in doc["resourceSpans"]
        for s in rs["scopeSpans"][0]["spans"]
        if s["kind"] == 2
    )
    assert server == Counter(table["callee"].to_pylist())


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_memory_is_a_batch_not_the_document(
    tables: dict[str, pa.Table], fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = tables["slow"]
    monkeypatch.setattr(export, "BATCH_SPANS", 256)
    out = tmp_path / "t.json"
    tracemalloc.start()
    try:
        write_export(table, fmt, out, max_traces=1500)
        streamed = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        doc = export_traces(table, fmt, max_traces=1500)
        whole = tracemalloc.get_traced_memory()[1]
        del doc
    finally:
        tracemalloc.stop()
    # About a tenth of the document's objects, and less than the file it wrote.
    assert streamed < whole / 4
    assert streamed < out.stat().st_size


def test_a_batch_that_fails_leaves_the_previous_file(
    tables: dict[str, pa.Table], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "t.json"
    out.write_text("previous\n")
    monkeypatch.setattr(export, "BATCH_SPANS", 100)
    dumps, calls = export._dumps, []

    def failing(value: Any) -> str:
        calls.append(1)
        if len(calls) == 5:  # a few batches are already in the temporary file
            raise ValueError("Out of range float values are not JSON compliant")
        return dumps(value)

    monkeypatch.setattr(export, "_dumps", failing)
    with pytest.raises(ValueError, match="not JSON compliant"):
        write_export(tables["slow"], "zipkin", out)
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_the_cli_writes_the_whole_document(
    tables: dict[str, pa.Table], fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src, out = tmp_path / "i.parquet", tmp_path / "o.json"
    pq.write_table(tables["slow"], src)
    argv = [
        "export",
        str(src),
        "--format",
        fmt,
        "--out",
        str(out),
        "--max-traces",
        "40",
        "--min-confidence",
        "0.9",
    ]
    assert main(argv) == 0, capsys.readouterr().err
    assert out.read_bytes() == _whole_json(infer.confident_instances(tables["slow"], 0.9)[0], fmt, 40)
