"""The command line, run in-process: exit codes, messages, files written."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tracefmt import read_trace, read_trace_metadata, write_trace
from wirepath.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error_line(err: str, starts: str) -> None:
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {starts}"), lines[0]


def rows(table: pa.Table, point: bool = False) -> list[tuple]:
    names = ["op", "sender", "receiver", "id", *(["point"] if point else [])]
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    return [(t, *rest) for t, *rest in zip(ts, *(table[n].to_pylist() for n in names), strict=True)]


TEXT = "# demo\n1.5 call client web 1\n1.75 return web client 1\n2 send a b -\n"
TEXT_ROWS = [
    (1_500_000_000, "call", "client", "web", 1),
    (1_750_000_000, "return", "web", "client", 1),
    (2_000_000_000, "send", "a", "b", None),
]


# --- convert -------------------------------------------------------------------------------


def test_convert_text_to_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text(TEXT)
    rc, out, err = run(capsys, "convert", tmp_path / "in.txt", tmp_path / "out.parquet")
    assert rc == 0
    assert err == ""
    assert out.strip() == f"wrote 3 messages to {tmp_path / 'out.parquet'}"
    assert rows(read_trace(tmp_path / "out.parquet")) == TEXT_ROWS


def test_convert_parquet_to_text(tmp_path: Path, capsys: pytest.CaptureFixture[str], make_table) -> None:
    write_trace(make_table(TEXT_ROWS), tmp_path / "in.parquet")
    rc, out, _ = run(capsys, "convert", tmp_path / "in.parquet", tmp_path / "out.txt")
    assert rc == 0
    assert "wrote 3 messages" in out
    assert (tmp_path / "out.txt").read_text() == (
        "# timestamp op sender receiver id\n"
        "1.500000000 call client web 1\n"
        "1.750000000 return web client 1\n"
        "2.000000000 send a b -\n"
    )


def test_convert_sort_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text("3 send a b 1\n1 send a b x\n2 send a b 3\n")
    rc, out, _ = run(capsys, "convert", "--sort", "--json", tmp_path / "in.txt", tmp_path / "out.parquet")
    assert rc == 0
    doc = json.loads(out)
    assert doc["messages"] == 3
    assert doc["sorted"] is True
    assert doc["hashed_ids"] == 1
    assert doc["target"] == str(tmp_path / "out.parquet")
    assert read_trace(tmp_path / "out.parquet")["timestamp"].cast(pa.int64()).to_pylist() == [
        1_000_000_000,
        2_000_000_000,
        3_000_000_000,
    ]


def test_convert_reports_hashed_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text("1 send a b req-1\n2 send a b req-2\n")
    rc, out, _ = run(capsys, "convert", tmp_path / "in.txt", tmp_path / "out.parquet")
    assert rc == 0
    assert "2 non-numeric ids mapped to 64-bit hashes" in out


def test_convert_skip_bad(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.txt"
    src.write_text("1 call a b 1\n2 cal a b 1\n3 return b a 1\n4 send a\n")
    rc, out, err = run(capsys, "convert", "--skip-bad", src, tmp_path / "out.parquet")
    assert rc == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == f"wrote 2 messages to {tmp_path / 'out.parquet'}"
    assert lines[1] == "skipped 2 bad lines; first ones:"
    assert lines[2] == f"  {src}:2: unknown op 'cal' (must be one of call, return, send)"
    assert lines[3].startswith(f"  {src}:4: expected 5 fields")
    assert read_trace(tmp_path / "out.parquet").num_rows == 2


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        pytest.param("2 cal a b 1", "unknown op 'cal' (must be one of call, return, send)", id="unknown-op"),
        pytest.param(
            "2 call a b", "expected 5 fields (timestamp op sender receiver id), got 4", id="4-fields"
        ),
        pytest.param("soon call a b 1", "invalid timestamp 'soon'", id="bad-timestamp"),
    ],
)
def test_convert_bad_line(line: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "trace.txt"
    src.write_text(f"1 call a b 1\n{line}\n")
    rc, out, err = run(capsys, "convert", src, tmp_path / "out.parquet")
    assert rc == 1
    assert out == ""
    assert_one_error_line(err, f"{src}:2: {reason}")
    assert not (tmp_path / "out.parquet").exists()


def test_convert_unknown_extension(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text(TEXT)
    rc, _, err = run(capsys, "convert", tmp_path / "in.txt", tmp_path / "out.csv")
    assert rc == 1
    assert_one_error_line(err, f"{tmp_path / 'out.csv'}: unknown trace file type (name it .parquet")


@pytest.mark.parametrize("name", ["missing.txt", "missing.parquet"], ids=["text", "parquet"])
def test_convert_missing_input(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = run(capsys, "convert", tmp_path / name, tmp_path / "out.pq")
    assert rc == 1
    assert_one_error_line(err, f"{tmp_path / name}: no such file")
    assert not (tmp_path / "out.pq").exists()


def test_convert_needs_an_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "in.txt").write_text(TEXT)
    rc, out, err = run(capsys, "convert", tmp_path / "in.txt")
    assert rc == 1
    assert out == ""
    assert_one_error_line(err, "give exactly one of OUTPUT or --store DIR")


def test_convert_unwritable_name(tmp_path: Path, capsys: pytest.CaptureFixture[str], make_table) -> None:
    write_trace(make_table([(1, "send", "web server", "b", None)]), tmp_path / "in.parquet")
    rc, _, err = run(capsys, "convert", tmp_path / "in.parquet", tmp_path / "out.txt")
    assert rc == 1
    assert_one_error_line(err, "sender 'web server' cannot be written to the text form")
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["convert", "a.txt", "b.parquet", "--frobnicate"], id="unknown-flag"),
        pytest.param(["convert"], id="missing-input"),
        pytest.param(["frobnicate"], id="unknown-verb"),
        pytest.param([], id="no-verb"),
        pytest.param(["merge", "a.parquet"], id="merge-without-out"),
        pytest.param(["info", "t.parquet", "--edges", "many"], id="edges-not-int"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, *argv)
    assert rc == 2
    assert out == ""
    assert "usage: wirepath" in err
    assert "error:" in err.splitlines()[-1]


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["convert", "--help"], ["merge", "--help"], ["info", "--help"]],
    ids=["top", "convert", "merge", "info"],
)
def test_help_exits_0(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    assert out.startswith("usage: wirepath")


def test_help_lists_the_verbs(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "--help")
    for verb in ("convert", "merge", "info"):
        assert verb in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "--version")
    assert rc == 0
    assert out.strip() == "wirepath 0.1.0"


# --- merge ---------------------------------------------------------------------------------


@pytest.fixture
def merge_inputs(tmp_path: Path, make_table) -> tuple[Path, Path]:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(
        make_table([(1_000_000_000, "call", "10.0.0.5", "db", 1), (3_000_000_000, "send", "x", "y", None)]), a
    )
    # b's clock runs 12 ms late: its copy of the call is at 1.0125 s, i.e. 0.5 ms after a's once corrected.
    write_trace(
        make_table([(1_012_500_000, "call", "WS1", "db", 1), (2_012_000_000, "send", "y", "x", 2)]), b
    )
    return a, b


def test_merge_with_offset_names_and_json(
    merge_inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = merge_inputs
    names = tmp_path / "names.toml"
    names.write_text('[names]\n"10.0.0.5" = "WS1"\n')
    out_path = tmp_path / "m.parquet"
    rc, out, err = run(
        capsys, "merge", a, b, "--out", out_path, "--offset", "b.parquet=-12ms", "--names", names, "--json"
    )
    assert rc == 0
    assert err == ""
    doc = json.loads(out)
    assert doc["messages"] == 3
    assert doc["duplicates_removed"] == 1
    assert doc["dedup_window_ns"] == 1_000_000
    assert doc["renamed"] == {"10.0.0.5": "WS1"}
    assert [(i["path"], i["offset_ns"], i["messages"]) for i in doc["inputs"]] == [
        (str(a), 0, 2),
        (str(b), -12_000_000, 2),
    ]
    assert rows(read_trace(out_path), point=True) == [
        (1_000_000_000, "call", "WS1", "db", 1, "a"),
        (2_000_000_000, "send", "y", "x", 2, "b"),
        (3_000_000_000, "send", "x", "y", None, "a"),
    ]
    assert read_trace_metadata(out_path).provenance["merge"]["inputs"][1]["offset_ns"] == -12_000_000


def test_merge_text_summary(
    merge_inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = merge_inputs
    out_path = tmp_path / "m.parquet"
    rc, out, _ = run(capsys, "merge", a, b, "--out", out_path, "--offset", f"{b}=-12ms")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0] == f"merged 2 traces (4 messages) into {out_path}"
    assert lines[1] == f"  {a}: 2 messages, point a"
    assert lines[2] == f"  {b}: 2 messages, point b, offset -12 ms"
    # Without --names the call's sender differs (10.0.0.5 vs WS1): nothing to remove.
    assert lines[3] == "removed 0 duplicates (window 1 ms); wrote 4"


def test_merge_no_dedup(
    merge_inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = merge_inputs
    names = tmp_path / "names.toml"
    names.write_text('"10.0.0.5" = "WS1"\n')
    out_path = tmp_path / "m.parquet"
    rc, out, _ = run(
        capsys,
        "merge",
        a,
        b,
        "--out",
        out_path,
        "--offset",
        "b.parquet=-12ms",
        "--names",
        names,
        "--no-dedup",
        "--json",
    )
    assert rc == 0
    doc = json.loads(out)
    assert doc["duplicates_removed"] == 0
    assert doc["dedup_window_ns"] is None
    assert read_trace(out_path).num_rows == 4


@pytest.mark.parametrize(
    ("window", "removed"),
    [("400us", 0), ("0.0005s", 1), ("1ms", 1)],
    ids=["400us", "0.5ms-as-seconds", "1ms"],
)
def test_merge_dedup_window(
    window: str,
    removed: int,
    merge_inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = merge_inputs
    names = tmp_path / "names.toml"
    names.write_text('"10.0.0.5" = "WS1"\n')
    rc, out, _ = run(
        capsys,
        "merge",
        a,
        b,
        "--out",
        tmp_path / "m.parquet",
        "--offset",
        "b.parquet=-12ms",
        "--names",
        names,
        "--dedup-window",
        window,
        "--json",
    )
    assert rc == 0
    assert json.loads(out)["duplicates_removed"] == removed


def test_merge_offset_naming_a_non_input(
    merge_inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = merge_inputs
    rc, out, err = run(capsys, "merge", a, b, "--out", tmp_path / "m.parquet", "--offset", "c.parquet=1ms")
    assert rc == 1
    assert out == ""
    assert_one_error_line(err, "--offset names 'c.parquet', which is not an input (inputs: ")
    assert not (tmp_path / "m.parquet").exists()


def test_merge_ambiguous_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str], make_table) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    for d in ("x", "y"):
        write_trace(make_table([(1, "send", "a", "b", 1)]), tmp_path / d / "t.parquet")
    rc, _, err = run(
        capsys,
        "merge",
        tmp_path / "x" / "t.parquet",
        tmp_path / "y" / "t.parquet",
        "--out",
        tmp_path / "m.parquet",
        "--offset",
        "t.parquet=1ms",
    )
    assert rc == 1
    assert_one_error_line(err, "--offset names 't.parquet', which is ambiguous")


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        pytest.param("b.parquet", "--offset 'b.parquet' must be INPUT=DURATION", id="no-equals"),
        pytest.param("=1ms", "--offset '=1ms' must be INPUT=DURATION", id="no-name"),
        pytest.param("b.parquet=soon", "invalid duration 'soon'", id="bad-duration"),
    ],
)
def test_merge_bad_offset(
    offset: str,
    message: str,
    merge_inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = merge_inputs
    rc, _, err = run(capsys, "merge", a, b, "--out", tmp_path / "m.parquet", "--offset", offset)
    assert rc == 1
    assert_one_error_line(err, message)


@pytest.mark.parametrize(
    ("window", "message"),
    [("-1ms", "duration '-1ms' must not be negative"), ("wide", "invalid duration 'wide'")],
    ids=["negative", "garbage"],
)
def test_merge_bad_window(
    window: str,
    message: str,
    merge_inputs: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    a, b = merge_inputs
    rc, _, err = run(capsys, "merge", a, b, "--out", tmp_path / "m.parquet", f"--dedup-window={window}")
    assert rc == 1
    assert_one_error_line(err, message)


def test_merge_bad_names_file(
    merge_inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = merge_inputs
    names = tmp_path / "names.toml"
    names.write_text('"10.0.0.5" = 5\n')
    rc, _, err = run(capsys, "merge", a, b, "--out", tmp_path / "m.parquet", "--names", names)
    assert rc == 1
    assert_one_error_line(err, f"{names}: name for '10.0.0.5' must be a non-empty string")


def test_merge_unsorted_input(tmp_path: Path, capsys: pytest.CaptureFixture[str], make_table) -> None:
    write_trace(make_table([(2, "send", "a", "b", 1), (1, "send", "a", "b", 2)]), tmp_path / "u.parquet")
    rc, _, err = run(capsys, "merge", tmp_path / "u.parquet", "--out", tmp_path / "m.parquet")
    assert rc == 1
    assert_one_error_line(err, f"{tmp_path / 'u.parquet'}: not sorted by timestamp at message 2")
    assert "wirepath convert --sort" in err
    assert not (tmp_path / "m.parquet").exists()


def test_merge_missing_input(
    merge_inputs: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, _ = merge_inputs
    rc, _, err = run(capsys, "merge", a, tmp_path / "nope.parquet", "--out", tmp_path / "m.parquet")
    assert rc == 1
    assert_one_error_line(err, f"{tmp_path / 'nope.parquet'}: no such file")


# --- info ----------------------------------------------------------------------------------


@pytest.fixture
def info_trace(tmp_path: Path, make_table) -> Path:
    path = tmp_path / "t.parquet"
    table = make_table(
        [
            (1_000_000_000, "call", "client", "web", 1),
            (1_500_000_000, "return", "web", "client", 1),
            (2_000_000_000, "call", "client", "web", 2),
            (3_000_000_000, "send", "web", "log", None),
        ],
        proto=["http"] * 4,
    )
    write_trace(table, path, provenance={"source": "test"})
    return path


def test_info_text(info_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "info", info_trace)
    assert rc == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == str(info_trace)
    assert lines[1] == "messages   4 (call 2, return 1, send 1)"
    assert "(2 s, 2.0 msg/s)" in lines[2]
    assert lines[3] == "nodes      3: client log web"
    assert "calls - returns = +1; 1 of 1 RPC pairs unbalanced" in out
    assert "columns    proto" in out


def test_info_json(info_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "info", info_trace, "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["messages"] == 4
    assert doc["span_s"] == 2.0
    assert doc["rate_per_s"] == 2.0
    assert doc["nodes"] == ["client", "log", "web"]
    assert doc["ops"] == {"call": 2, "return": 1, "send": 1}
    assert doc["edges"][0] == {"sender": "client", "receiver": "web", "messages": 2}
    assert doc["balance"]["unbalanced_pairs"] == [
        {"caller": "client", "callee": "web", "calls": 2, "returns": 1}
    ]
    assert doc["null_ids"] == 1
    assert doc["columns"] == ["proto"]
    assert doc["provenance"] == {"source": "test"}


def test_info_on_text_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "t.txt").write_text(TEXT)
    rc, out, _ = run(capsys, "info", tmp_path / "t.txt", "--json")
    assert rc == 0
    doc = json.loads(out)
    assert doc["messages"] == 3
    assert doc["start"] == "1970-01-01T00:00:01.500000000Z"
    assert doc["balance"]["unbalanced_pairs"] == []


def test_info_edges_limit(info_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(capsys, "info", info_trace, "--edges", "1")
    assert rc == 0
    assert "  ... 2 more" in out


@pytest.mark.parametrize("name", ["missing.parquet", "missing.txt"], ids=["parquet", "text"])
def test_info_missing_file(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(capsys, "info", tmp_path / name)
    assert rc == 1
    assert out == ""
    assert_one_error_line(err, f"{tmp_path / name}: no such file")


def test_info_bad_text_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.txt"
    path.write_text("1 call a b 1\n\n3 call a b 1 extra\n")
    rc, _, err = run(capsys, "info", path)
    assert rc == 1
    assert_one_error_line(err, f"{path}:3: expected 5 fields (timestamp op sender receiver id), got 6")


def test_info_corrupt_parquet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "t.parquet"
    path.write_bytes(b"PAR1 not really")
    rc, _, err = run(capsys, "info", path)
    assert rc == 1
    assert_one_error_line(err, f"{path}: not a readable Parquet trace")


def test_python_dash_m_entry_point_exists() -> None:
    import importlib.util

    assert importlib.util.find_spec("wirepath.__main__") is not None


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["infer", "nesting", "t.parquet", "--out", "p.json", "--x", "1"], "--x is now --overlap-penalty"),
        (["infer", "nesting", "t.parquet", "--out", "p.json", "--no-ids"], "--no-ids is now --no-use-ids"),
        (["synth", "c.toml", "--out", "t.parquet", "--queue", "8"], "--queue is now --loss-queue"),
        (["trend", "compare", "--parent", "1,2", "--current", "1,2", "--name", "a"], "--name is now --test"),
    ],
    ids=["x", "no-ids", "queue", "name"],
)
def test_a_renamed_flag_names_its_new_name(
    capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert hint in err
