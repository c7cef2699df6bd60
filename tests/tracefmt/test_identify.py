"""A file given to the wrong verb: the error says what it is and which verb reads it
(``tracefmt.identify``), for captures, traces, instances tables, paths files and spans."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tracefmt.identify import CAPTURE, INSTANCES, PATHS, RESULTS, SPANS, TRACE, file_kind
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("kinds")
    trace, pcap = d / "t.parquet", d / "t.pcap"
    config = str(ROOT / "samples" / "synth" / "multitier.toml")
    assert (
        main(["synth", config, "--messages", "400", "--out", str(trace), "--pcap", str(pcap), "--quiet"]) == 0
    )
    paths, inst = d / "p.json", d / "i.parquet"
    argv = ["infer", "nesting", str(trace), "--out", str(paths), "--instances", str(inst)]
    assert main([*argv, "--no-calibrate", "--quiet"]) == 0
    gz = d / "t.pcap.gz"
    gz.write_bytes(gzip.compress(pcap.read_bytes()))
    spans = d / "s.json"
    spans.write_text(json.dumps({"data": [{"traceID": "1", "spans": [], "processes": {}}]}))
    csv = d / "r.csv"
    csv.write_text("test,build,time,value\nip4,1,2024-05-01T00:00:00Z,10\n")
    store = d / "store"
    assert main(["trend", "import", str(csv), "--store", str(store), "--quiet"]) == 0
    (results,) = sorted((store / "results").glob("*.parquet"))
    return {
        "trace": trace,
        "pcap": pcap,
        "gz": gz,
        "paths": paths,
        "inst": inst,
        "spans": spans,
        "results": results,
    }


def test_each_kind_is_told_apart(files: dict[str, Path], tmp_path: Path) -> None:
    got = {name: file_kind(path) for name, path in files.items()}
    assert got == {
        "trace": TRACE,
        "pcap": CAPTURE,
        "gz": CAPTURE,
        "paths": PATHS,
        "inst": INSTANCES,
        "spans": SPANS,
        "results": RESULTS,
    }
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")
    assert file_kind(other) is None
    assert file_kind(tmp_path / "missing") is None


def _one_error(capsys: pytest.CaptureFixture[str], rc: int) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert rc != 0
    assert len(err) == 1, err
    assert err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize(
    ("argv", "name", "said"),
    [
        (
            ["info", "{f}"],
            "pcap",
            "not a trace but a packet capture; make it a trace with "
            "`wirepath capture pcap {f} --out trace.parquet`",
        ),
        (["infer", "nesting", "{f}", "--out", "{o}.json"], "gz", "not a trace but a packet capture"),
        (
            ["info", "{f}"],
            "inst",
            "not a trace but an instances table (written by `infer nesting "
            "--instances`); read by `wirepath export {f}`",
        ),
        (["convert", "{f}", "{o}.parquet"], "inst", "not a trace but an instances table"),
        (
            ["infer", "convolution", "{f}", "--quantum", "1ms", "--out", "{o}.json"],
            "results",
            "not a trace but a trend results file",
        ),
        (
            ["info", "{f}"],
            "paths",
            "not a trace but a paths file (written by `infer nesting` or "
            "`infer convolution`); read by `wirepath viz draw {f}`",
        ),
        (["convert", "{f}", "{o}.parquet"], "paths", "not tracing spans but a paths file"),
        (["viz", "draw", "{f}", "--out", "{o}.svg"], "pcap", "not a paths file but a packet capture"),
        (["viz", "draw", "{f}", "--out", "{o}.svg"], "inst", "not a paths file but an instances table"),
        (
            ["report", "{f}", "--out", "{o}.html"],
            "trace",
            "not a paths file but a trace; read by `wirepath info`",
        ),
    ],
    ids=[
        "info-pcap",
        "nesting-pcap-gz",
        "info-instances",
        "convert-instances",
        "convolution-results",
        "info-paths",
        "convert-paths",
        "draw-pcap",
        "draw-instances",
        "report-trace",
    ],
)
def test_the_wrong_file_is_named_with_the_verb_that_reads_it(
    files: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    name: str,
    said: str,
) -> None:
    f, o = str(files[name]), str(tmp_path / "out")
    line = _one_error(capsys, main([a.format(f=f, o=o) for a in argv]))
    assert said.format(f=f) in line
    assert not any(tmp_path.iterdir())
