"""``trend import`` parses a CSV file a block at a time: what spans blocks (a run's trials
numbered by row order, a (run, trial) given twice, the line an error names) must come
out as if the file were one block.

Blocks are made small here (a few KiB) so that a file of a few hundred rows spans many.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

import trend.series as ts
from tracefmt import ParseError, Store
from trend import import_results, load_series, read_result_rows


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    monkeypatch.setattr(ts, "_BLOCK_BYTES", 4096)
    monkeypatch.setattr(ts, "_SCAN_BYTES", 1000)
    ts._data_lines.cache_clear()


def _rows(n_series: int = 12, runs: int = 15, trials: int = 3) -> list[tuple[str, str, int, int, float]]:
    """(test, build, time, trial, value) in an order that spreads each run's trials far apart."""
    rows = []
    for k in range(trials):
        for s in range(n_series):
            for r in range(runs):
                rows.append(
                    (
                        f"test-{s:03d}-64b-mrr",
                        f"build-{r:04d}",
                        1_700_000_000 + r * 3600,
                        k,
                        1e6 + s + r + k / 10,
                    )
                )
    return rows


def _write(path, rows, *, trial_column: bool = True, blank_every: int = 0) -> None:
    lines = ["test,build,time,trial,value" if trial_column else "test,build,time,value"]
    for i, (test, build, time, trial, value) in enumerate(rows):
        lines.append(
            f"{test},{build},{time},{trial},{value!r}" if trial_column else f"{test},{build},{time},{value!r}"
        )
        if blank_every and i % blank_every == blank_every - 1:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")


def test_a_file_of_many_blocks_is_stored_row_for_row(tmp_path):
    rows = _rows()
    _write(tmp_path / "r.csv", rows)
    assert (tmp_path / "r.csv").stat().st_size > 6 * 4096  # blocks: several
    out, summary = import_results(Store.create(tmp_path / "store"), tmp_path / "r.csv")
    table = pq.read_table(out)
    assert table.column("test").to_pylist() == [r[0] for r in rows]
    assert table.column("build").to_pylist() == [r[1] for r in rows]
    assert table.column("trial").to_pylist() == [r[3] for r in rows]
    assert table.column("value").to_pylist() == [r[4] for r in rows]
    assert summary == {"series": 12, "runs": 180, "trials": len(rows), "failed_trials": 0}
    series = load_series(tmp_path / "store")
    assert [len(s.builds) for s in series] == [15] * 12
    assert all(t.size == 3 for s in series for t in s.trials)


def test_trials_numbered_by_row_order_across_blocks(tmp_path):
    rows = _rows()
    _write(tmp_path / "r.csv", rows, trial_column=False)
    table = read_result_rows(tmp_path / "r.csv")
    # Each run's trials are its rows in file order, blocks apart: 0, 1, 2.
    assert table.column("trial").to_pylist() == [r[3] for r in rows]


def test_a_duplicate_blocks_apart_names_both_lines(tmp_path):
    rows = _rows()
    rows.append(rows[5])  # the sixth data row again, at the end
    _write(tmp_path / "r.csv", rows, blank_every=7)
    with pytest.raises(ParseError) as e:
        read_result_rows(tmp_path / "r.csv")
    text = (tmp_path / "r.csv").read_text().splitlines()
    last = max(i for i, line in enumerate(text, start=1) if line.strip())
    first = next(
        i
        for i, line in enumerate(text, start=1)
        if line.startswith(f"{rows[5][0]},{rows[5][1]},") and line.endswith(f",{rows[5][3]},{rows[5][4]!r}")
    )
    assert f":{last}:" in str(e.value)
    assert f"already given on line {first}" in str(e.value)


def test_a_bad_value_in_a_later_block_names_its_line(tmp_path):
    rows = _rows()
    _write(tmp_path / "r.csv", rows, blank_every=5)
    lines = (tmp_path / "r.csv").read_text().splitlines()
    at = len(lines) - 20
    while not lines[at - 1].strip():
        at -= 1
    lines[at - 1] = lines[at - 1].rsplit(",", 1)[0] + ",12abc"
    (tmp_path / "r.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ParseError) as e:
        import_results(Store.create(tmp_path / "store"), tmp_path / "r.csv")
    assert f"r.csv:{at}:" in str(e.value)
    assert "'12abc' is not a number" in str(e.value)
    assert not list((tmp_path / "store" / "results").glob("*.parquet"))  # nothing written


def test_a_row_with_too_many_fields_in_a_later_block_names_its_line(tmp_path):
    rows = _rows()
    _write(tmp_path / "r.csv", rows)
    lines = (tmp_path / "r.csv").read_text().splitlines()
    lines[400] += ",extra"
    (tmp_path / "r.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(ParseError) as e:
        read_result_rows(tmp_path / "r.csv")
    assert "r.csv:401:" in str(e.value)
    assert "6 fields, the header has 5" in str(e.value)


def test_data_lines_scan_matches_a_line_count(tmp_path):
    rng = np.random.default_rng(3)
    text = ["a,b"]
    for _ in range(3000):
        text.append(rng.choice(["x,1", "", "  ", "\t", "y,2 "]))
    body = "\n".join(text) + rng.choice(["", "\n"])
    p = tmp_path / "l.csv"
    p.write_text(body)
    want = [i for i, line in enumerate(body.split("\n"), start=1) if line.strip()][1:]
    assert ts._data_lines(str(p)).tolist() == want


def _jsonl(path, rows, *, blank_every: int = 0) -> None:
    import json

    lines = []
    for i, (test, build, time, trial, value) in enumerate(rows):
        lines.append(json.dumps({"test": test, "build": build, "time": time, "trial": trial, "value": value}))
        if blank_every and i % blank_every == blank_every - 1:
            lines.append("")
    path.write_text("\n".join(lines) + "\n")


def test_json_lines_in_many_blocks_give_the_csv_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "_JSON_BLOCK", 37)
    rows = _rows()
    _write(tmp_path / "r.csv", rows)
    _jsonl(tmp_path / "r.jsonl", rows, blank_every=11)
    assert read_result_rows(tmp_path / "r.jsonl").equals(read_result_rows(tmp_path / "r.csv"))


def test_json_lines_errors_name_their_line(tmp_path, monkeypatch):
    monkeypatch.setattr(ts, "_JSON_BLOCK", 37)
    rows = _rows()
    rows.append(rows[3])  # the fourth record again, blocks later
    _jsonl(tmp_path / "r.jsonl", rows, blank_every=11)
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    with pytest.raises(ParseError) as e:
        read_result_rows(tmp_path / "r.jsonl")
    assert f"r.jsonl:{len(lines)}:" in str(e.value)
    assert "already given on line 4" in str(e.value)
    lines[200] = '{"test": "x", "build": '
    (tmp_path / "r.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(ParseError) as e:
        read_result_rows(tmp_path / "r.jsonl")
    assert "r.jsonl:201: not a JSON object" in str(e.value)
