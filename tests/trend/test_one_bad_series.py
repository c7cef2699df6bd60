"""A series the trend analysis cannot take (values too small to count bits in, subnormal
floats) is one error line, and never hides the other series: a regression elsewhere in the
store is still reported, with its exit status (issue 39, item 18)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "trend"


def test_compare_of_subnormal_values_is_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["trend", "compare", "--parent", "5e-324,1e-323", "--current", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3
    assert len(err) == 1
    assert "too small to count bits in" in err[0]


def test_a_subnormal_unit_is_one_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trend", "compare", "--parent", "1,2", "--current", "1", "--unit", "5e-324"]) == 3
    assert "below 2.22507e-308" in capsys.readouterr().err


@pytest.fixture
def store_with_a_bad_series(tmp_path: Path) -> Path:
    store = tmp_path / "store"
    assert main(["trend", "import", str(SAMPLES / "mrr.csv"), "--store", str(store)]) == 0
    rows = ["test,build,time,value"]
    rows += [f"tiny,b{k},2024-05-{k + 1:02d}T02:00:00Z,{5e-324 * (k % 2 + 1)!r}" for k in range(10)]
    (tmp_path / "tiny.csv").write_text("\n".join(rows) + "\n")
    assert main(["trend", "import", str(tmp_path / "tiny.csv"), "--store", str(store)]) == 0
    return store


def test_check_reports_the_regression_beside_a_bad_series(
    capsys: pytest.CaptureFixture[str], store_with_a_bad_series: Path, tmp_path: Path
) -> None:
    alert = tmp_path / "alert.md"
    rc = main(["trend", "check", "--store", str(store_with_a_bad_series), "--alert", str(alert)])
    said = capsys.readouterr()
    assert rc == 1, said.err  # the regression, not the bad series' 3
    assert "regressed" in alert.read_text()
    assert "l2bdbase-64b-2c" in alert.read_text()
    lines = said.err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: test 'tiny'")


def test_analyze_shows_every_good_series_and_names_the_bad_one(
    capsys: pytest.CaptureFixture[str], store_with_a_bad_series: Path
) -> None:
    rc = main(["trend", "analyze", "--store", str(store_with_a_bad_series)])
    said = capsys.readouterr()
    assert rc == 1
    assert "l2bdbase-64b-2c" in said.out
    assert said.err.strip().splitlines()[0].startswith("error: test 'tiny'")


def test_check_of_only_bad_series_is_undecided(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    store = tmp_path / "store"
    (tmp_path / "tiny.csv").write_text("test,build,time,value\ntiny,b1,2024-05-01T02:00:00Z,5e-324\n")
    assert main(["trend", "import", str(tmp_path / "tiny.csv"), "--store", str(store)]) == 0
    assert main(["trend", "check", "--store", str(store)]) == 3
    assert capsys.readouterr().err.count("error:") == 1
    shutil.rmtree(store)
