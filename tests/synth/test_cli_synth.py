"""``wirepath synth``, run in-process: exit codes, the summary, files, overrides."""

from __future__ import annotations

import filecmp
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from tracefmt import read_trace
from wirepath.cli import main

CLI_TOML = """\
nodes = ["client", "WS1", "WS2", "AP"]

[trace]
seed = 5
messages = 20000
resolution_s = 1e-6

[[tracelet]]
name = "req"
client = "client"
clients = 3
think_s = [0.0, 0.01]

[[tracelet.call]]
id = "ws"
to = ["WS1", "WS2"]
before_s = [0.002, 0.0005]
after_s = [0.001, 0.0002]

[[tracelet.call]]
id = "ap"
parent = "ws"
to = "AP"
before_s = [0.003, 0.0005]
"""


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    path = tmp_path / "cli.toml"
    path.write_text(CLI_TOML, encoding="utf-8")
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error_line(err: str, starts: str) -> None:
    lines = err.strip("\n").splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"error: {starts}"), lines[0]


def core_rows(table: pa.Table) -> list[tuple]:
    ts = table["timestamp"].cast(pa.int64()).to_pylist()
    cols = [table[n].to_pylist() for n in ("op", "sender", "receiver", "id")]
    return list(zip(ts, *cols, strict=True))


def test_synth_writes_trace_truth_and_summary(tmp_path: Path, cfg: Path, capsys, h) -> None:
    out, truth = tmp_path / "t.parquet", tmp_path / "t.json"
    rc, stdout, err = run(capsys, "synth", cfg, "--out", out, "--truth", truth, "--messages", "5000")
    assert rc == 0, err
    assert err == ""
    m = h.msgs(read_trace(out))
    assert 5000 <= m.size < 5000 + 4  # whole instances of 4 messages
    n_inst = int(np.unique(m.inst).size)
    n_pat = int(np.unique(m.pattern).size)
    lines = stdout.strip("\n").splitlines()
    assert lines[0] == f"wrote {m.size:,} messages ({n_inst:,} instances, {n_pat} patterns) to {out}"
    span = re.fullmatch(
        r"span ([\d,.]+) s; mean parallelism ([\d.]+) \(client loops \{'req': 3\}\)", lines[1]
    )
    assert span, lines[1]
    brute = h.brute_parallelism(h.calls(m))
    assert float(span.group(2)) == pytest.approx(brute, abs=0.051)
    assert lines[-1] == f"truth: {truth}"
    doc = json.loads(truth.read_text())
    assert sum(p["count"] for p in doc["patterns"]) == n_inst
    assert doc["messages"] == m.size


def test_synth_json(tmp_path: Path, cfg: Path, capsys) -> None:
    out = tmp_path / "t.parquet"
    rc, stdout, _ = run(capsys, "synth", cfg, "--out", out, "--messages", "3000", "--json")
    assert rc == 0
    doc = json.loads(stdout)
    table = read_trace(out)
    assert doc["messages"] == table.num_rows
    assert doc["instances"] == len(set(table["true_instance"].to_pylist()))
    assert doc["loops"] == {"req": 3}
    assert doc["lost"] == 0
    assert "truth" not in doc


def test_parallelism_override_is_reported(tmp_path: Path, cfg: Path, capsys, h) -> None:
    text = CLI_TOML.replace("clients = 3\n", "")
    cfg.write_text(text, encoding="utf-8")
    out = tmp_path / "t.parquet"
    rc, stdout, _ = run(capsys, "synth", cfg, "--out", out, "--parallelism", "6", "--messages", "20000")
    assert rc == 0
    assert "(requested 6; client loops {'req': " in stdout
    measured = float(re.search(r"mean parallelism ([\d.]+)", stdout).group(1))
    brute = h.brute_parallelism(h.calls(h.msgs(read_trace(out))))
    assert measured == pytest.approx(brute, abs=0.051)
    assert abs(brute - 6) <= 0.6


@pytest.mark.parametrize("suffix", [".txt", ".txt.gz", ".trace", ".trace.gz"])
def test_text_output_reads_back(tmp_path: Path, cfg: Path, capsys, suffix: str) -> None:
    text_out = tmp_path / f"t{suffix}"
    rc, _, err = run(capsys, "synth", cfg, "--out", text_out, "--messages", "3000", "--format", "txt")
    assert rc == 0, err
    rc, _, err = run(capsys, "synth", cfg, "--out", tmp_path / "t.parquet", "--messages", "3000")
    assert rc == 0, err
    rc, _, err = run(capsys, "convert", text_out, tmp_path / "back.parquet")
    assert rc == 0, err
    back = read_trace(tmp_path / "back.parquet")
    assert core_rows(back) == core_rows(read_trace(tmp_path / "t.parquet"))


def test_text_output_is_the_text_form(tmp_path: Path, cfg: Path, capsys) -> None:
    out = tmp_path / "t.txt"
    assert run(capsys, "synth", cfg, "--out", out, "--messages", "3000")[0] == 0
    lines = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    assert len(lines) >= 3000
    for line in lines[:50]:
        ts, op, sender, receiver, ident = line.split()
        assert re.fullmatch(r"\d+\.\d{9}", ts)
        assert op in ("call", "return")
        assert {sender, receiver} <= {"client", "WS1", "WS2", "AP"}
        assert ident.isdigit()


def test_format_must_match_the_file_name(tmp_path: Path, cfg: Path, capsys) -> None:
    rc, _, err = run(capsys, "synth", cfg, "--out", tmp_path / "t.parquet", "--format", "txt")
    assert rc == 1
    assert_one_error_line(err, "--format txt does not match")
    assert not (tmp_path / "t.parquet").exists()


def test_skew_flag(tmp_path: Path, cfg: Path, capsys, h) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(capsys, "synth", cfg, "--out", a, "--messages", "3000")[0] == 0
    rc, _, err = run(capsys, "synth", cfg, "--out", b, "--messages", "3000", "--skew", "WS2=30ms")
    assert rc == 0, err
    ma, mb = h.msgs(read_trace(a)), h.msgs(read_trace(b))
    before = dict(zip(ma.identities(), ma.ts.tolist(), strict=True))
    assert sorted(before) == sorted(mb.identities())
    shift = mb.ts - np.array([before[k] for k in mb.identities()])
    ws2 = (mb.sender == "WS2") | (mb.receiver == "WS2")
    assert ws2.any()
    assert np.all(np.abs(shift[ws2] - 30_000_000) <= 1000)  # to the 1 us resolution
    assert np.all(shift[~ws2] == 0)


@pytest.mark.parametrize(
    ("flag", "starts"),
    [
        ("NOPE=1s", "--skew: unknown node 'NOPE' (declared nodes: client, WS1, WS2, AP)"),
        ("WS2", "--skew 'WS2' must be NODE=DURATION"),
        ("WS2=0.03", "--skew: WS2: duration '0.03' has no unit: write 0.03s for seconds or 0.03ms"),
    ],
)
def test_bad_skew_flag(tmp_path: Path, cfg: Path, capsys, flag: str, starts: str) -> None:
    rc, out, err = run(capsys, "synth", cfg, "--out", tmp_path / "t.parquet", "--skew", flag)
    assert rc == 1
    assert out == ""
    assert_one_error_line(err, starts)
    assert not (tmp_path / "t.parquet").exists()


def test_loss_rate_reports_lost_messages(tmp_path: Path, cfg: Path, capsys) -> None:
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert run(capsys, "synth", cfg, "--out", a, "--messages", "5000")[0] == 0
    rc, out, err = run(
        capsys, "synth", cfg, "--out", b, "--messages", "5000", "--loss-rate", "300", "--loss-queue", "8"
    )
    assert rc == 0, err
    lost = read_trace(a).num_rows - read_trace(b).num_rows
    assert lost > 0
    assert f"lost {lost:,} messages at the capture point (300 pkt/s, queue 8)" in out.splitlines()


def test_queue_needs_a_loss_rate(tmp_path: Path, cfg: Path, capsys) -> None:
    rc, _, err = run(capsys, "synth", cfg, "--out", tmp_path / "t.parquet", "--loss-queue", "8")
    assert rc == 1
    assert_one_error_line(err, "--loss-queue needs a capture rate")


def test_duplicates_are_reported(tmp_path: Path, cfg: Path, capsys) -> None:
    cfg.write_text(CLI_TOML + "\n[faults.duplicates]\nfraction = 0.2\n", encoding="utf-8")
    out = tmp_path / "t.parquet"
    rc, stdout, _ = run(capsys, "synth", cfg, "--out", out, "--messages", "3000")
    assert rc == 0
    copies = read_trace(out)["point"].cast(pa.string()).to_pylist().count("p2")
    assert copies > 0
    assert f"duplicated {copies:,} messages (second capture point)" in stdout.splitlines()


def test_seed_flag(tmp_path: Path, cfg: Path, capsys) -> None:
    paths = [tmp_path / f"{n}.parquet" for n in "abc"]
    for path, seed in zip(paths, ["5", "5", "6"], strict=True):
        assert run(capsys, "synth", cfg, "--out", path, "--messages", "3000", "--seed", seed)[0] == 0
    assert filecmp.cmp(paths[0], paths[1], shallow=False)
    assert not filecmp.cmp(paths[0], paths[2], shallow=False)


def test_duration_flag(tmp_path: Path, cfg: Path, capsys, h) -> None:
    out = tmp_path / "t.parquet"
    rc, _, err = run(capsys, "synth", cfg, "--out", out, "--duration", "500ms")
    assert rc == 0, err
    c = h.calls(h.msgs(read_trace(out)))
    starts = (c.t_call[c.parent < 0] - h.config(CLI_TOML).start_ns) / 1e9
    assert starts.min() >= 0
    assert 0.45 < starts.max() <= 0.5


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--bogus"], id="unknown-flag"),
        pytest.param(["--messages", "10", "--duration", "1s"], id="messages-and-duration"),
        pytest.param(["--messages", "many"], id="messages-not-a-number"),
        pytest.param(["--format", "csv"], id="unknown-format"),
    ],
)
def test_usage_errors(tmp_path: Path, cfg: Path, capsys, argv: list[str]) -> None:
    rc, _, err = run(capsys, "synth", cfg, "--out", tmp_path / "t.parquet", *argv)
    assert rc == 2
    assert "error:" in err
    assert not (tmp_path / "t.parquet").exists()


def test_missing_out_is_a_usage_error(cfg: Path, capsys) -> None:
    assert run(capsys, "synth", cfg)[0] == 2


def test_bad_config_is_one_error_line(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(CLI_TOML.replace('to = "AP"', 'to = "APX"'), encoding="utf-8")
    line = CLI_TOML.splitlines().index('to = "AP"') + 1
    rc, out, err = run(capsys, "synth", bad, "--out", tmp_path / "t.parquet")
    assert rc == 1
    assert out == ""
    assert_one_error_line(err, f"{bad}:{line}: tracelet.call.to: unknown node 'APX'")


def test_missing_config_is_one_error_line(tmp_path: Path, capsys) -> None:
    rc, _, err = run(capsys, "synth", tmp_path / "nope.toml", "--out", tmp_path / "t.parquet")
    assert rc == 1
    assert_one_error_line(err, f"{tmp_path / 'nope.toml'}: no such file")
