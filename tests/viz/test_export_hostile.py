"""export refuses an instances table no tracing tool could take, with one line and
nothing written: a span that ends before it starts, a confidence that is not a number
from 0 to 1, parent links that loop; and never writes bare NaN."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import infer
from wirepath.cli import main

TS = pa.timestamp("ns", tz="UTC")
ROWS = [
    (0, "call", "c", "w", 1),
    (1, "call", "w", "d", 2),
    (2, "return", "d", "w", 2),
    (3, "return", "w", "c", 1),
]


@pytest.fixture(scope="module")
def table() -> pa.Table:
    t = pa.table(
        {
            "timestamp": pa.array([r[0] * 1_000_000 for r in ROWS], pa.int64()).cast(
                pa.timestamp("ns", tz="UTC")
            ),
            "sender": [r[2] for r in ROWS],
            "receiver": [r[3] for r in ROWS],
            "op": [r[1] for r in ROWS],
            "id": pa.array([r[4] for r in ROWS], pa.uint64()),
        }
    )
    return infer.infer_nesting(t).instances_table()


def _export(capsys, tmp_path: Path, table: pa.Table) -> tuple[int, str, Path]:
    src, out = tmp_path / "i.parquet", tmp_path / "o.json"
    pq.write_table(table, src)
    rc = main(["export", str(src), "--format", "otlp", "--out", str(out)])
    return rc, capsys.readouterr().err, out


def _replace(table: pa.Table, name: str, values: list) -> pa.Table:
    i = table.column_names.index(name)
    return table.set_column(i, name, pa.array(values, table.schema.field(name).type))


def test_a_good_table_exports(capsys, tmp_path, table) -> None:
    rc, err, out = _export(capsys, tmp_path, table)
    assert rc == 0, err
    json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c}"))


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("negative duration", "returns before it is called"),
        ("nan confidence", "confidence nan is not a probability"),
        ("confidence above one", "confidence 1.5 is not a probability"),
        ("cycle", "loop"),
    ],
)
def test_a_bad_table_is_one_error(capsys, tmp_path, table, case, expected) -> None:
    if case == "negative duration":
        t_call = table["t_call"].cast(pa.int64()).to_pylist()
        bad = _replace(table, "t_return", [t - 1 for t in t_call])
    elif case == "nan confidence":
        bad = _replace(table, "confidence", [1.0, float("nan")])
    elif case == "confidence above one":
        bad = _replace(table, "confidence", [1.0, 1.5])
    else:  # each pair the parent of the other: no root
        bad = _replace(table, "parent", [1, 0])
    rc, err, out = _export(capsys, tmp_path, bad)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert not out.exists()
