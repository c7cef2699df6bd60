"""A file name longer than the file system allows is one error line, exit 1, for the
verbs that read a trace, a paths file or an instances table (it once escaped as an
OSError traceback from the checks for a dataset directory or a store)."""

from __future__ import annotations

import pytest

from wirepath.cli import main

LONG = "x" * 300


@pytest.mark.parametrize(
    "argv",
    [
        ["info", f"{LONG}.parquet"],
        ["infer", "nesting", f"{LONG}.parquet", "--out", "OUT/p.json"],
        ["convert", f"{LONG}.parquet", "OUT/t.txt"],
        ["export", f"{LONG}.parquet", "--format", "otlp", "--out", "OUT/o.json"],
        ["capture", "pcap", f"{LONG}.pcap", "--out", "OUT/t.parquet"],
    ],
)
def test_a_name_too_long_is_one_error_line(argv: list[str], tmp_path, capsys) -> None:
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: ")
    assert "too long" in err[0] or "no such file" in err[0].lower()
    assert list(tmp_path.iterdir()) == []
