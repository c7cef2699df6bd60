"""`wirepath infer convolution` and `wirepath eval` on its paths file, in-process."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import synth
from wirepath.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "synth"


@pytest.fixture(scope="module")
def mail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mail")
    config = replace(synth.load_config(SAMPLES / "mail.toml"), messages=20000)
    synth.generate_trace(config, d / "mail.parquet")
    return d / "mail.parquet"


@pytest.fixture(scope="module")
def multitier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mt")
    config = replace(synth.load_config(SAMPLES / "multitier.toml"), messages=30000, parallelism=4.0)
    synth.generate_trace(config, d / "mt.parquet")
    return d / "mt.parquet"


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: "), err
    return err[0]


def test_mail_sample_end_to_end(mail: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    argv = ["infer", "convolution", str(mail), "--quantum", "2s", "--max-lag", "200s", "--band", "2s"]
    argv += ["--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "roots: sender1, sender2, sender3" in text
    assert "#1 " in text
    assert "-> relay" in text
    doc = json.loads(out.read_text())
    assert doc["algorithm"] == "convolution"
    assert doc["params"]["quantum_s"] == 2.0
    assert doc["params"]["max_lag_s"] == 200.0
    # The queue's second peak (12.5 s) shows at hub -> mx1 beside the direct pass (1.5 s).
    hub = [e for e in doc["graph"]["edges"] if e["edge"] == "hub->mx1"]
    assert hub
    assert any(abs(d - 12.5) < 2.0 for d in hub[0]["delays_s"])
    assert any(abs(d - 1.5) < 2.0 for d in hub[0]["delays_s"])
    assert main(["eval", str(out), str(mail), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["patterns"]["false_negatives"] == 0
    assert report["patterns"]["false_positives"] == 0


def test_multitier_sample_with_root_and_json(
    multitier: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    argv = ["infer", "convolution", str(multitier), "--quantum", "1ms", "--band", "2ms"]
    assert (
        main([*argv, "--root", "client", "--out", str(out), "--json", "--top", "5", "--method", "fft"]) == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["params"]["method"] == "fft"
    assert doc["stats"]["pairs_direct"] == 0
    assert doc == json.loads(out.read_text())
    assert doc["roots"] == ["client"]
    assert doc["params"]["root"] == ["client"]
    assert doc["params"]["max_lag_s"] == pytest.approx(1.0)  # auto: 1000 quanta
    assert len(doc["paths"]) == 5
    assert all(p["nodes"][0] == "client" for p in doc["paths"])
    assert main(["eval", str(out), str(multitier)]) == 0
    text = capsys.readouterr().out
    assert "patterns   true 16" in text
    # Hops in context of the 16 true paths: with AUTH 2+2+2+4+8+8+8+8, without 4+8+8+8+8.
    assert "edges      true 78, inferred" in text
    assert "--instances" not in text


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--quantum", "30h"], "longer than the trace"),
        (["--quantum", "1h"], "spans only"),
        (["--quantum", "1ms", "--root", "nobody"], "'nobody' is not a node"),
        (["--quantum", "nan"], "invalid duration 'nan'"),
        (["--quantum", "1s", "--max-lag", "3s"], "at least 10"),
        (["--quantum", "1ms", "--max-depth", "0"], "max_depth"),
    ],
    ids=["quantum-too-long", "few-quanta", "unknown-root", "nan-quantum", "few-lags", "depth"],
)
def test_bad_input_is_one_error_line(
    mail: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], match: str
) -> None:
    argv = ["infer", "convolution", str(mail), "--out", str(tmp_path / "p.json"), *extra]
    capsys.readouterr()
    assert main(argv) == 1
    assert match in _error(capsys)
    assert not (tmp_path / "p.json").exists()


def test_root_that_sends_nothing_and_nan_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "t.txt"
    text.write_text("".join(f"{k * 0.5} send a b -\n{k * 0.5 + 0.1} send b c -\n" for k in range(50)))
    out = tmp_path / "p.json"
    assert (
        main(["infer", "convolution", str(text), "--quantum", "10ms", "--root", "c", "--out", str(out)]) == 1
    )
    assert "root 'c' sends no messages (nodes that send: a, b)" in _error(capsys)
    bad = tmp_path / "nan.txt"
    bad.write_text("nan send a b -\n1.0 send b c -\n")
    assert main(["infer", "convolution", str(bad), "--quantum", "10ms", "--out", str(out)]) == 1
    assert "nan.txt:1" in _error(capsys)
    one = tmp_path / "one.txt"
    one.write_text("".join(f"{k * 0.5} send a b -\n" for k in range(50)))
    assert main(["infer", "convolution", str(one), "--quantum", "10ms", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "note: the trace has one directed edge (a->b)" in printed
    assert json.loads(out.read_text())["paths"][0]["nodes"] == ["a", "b"]


def test_eval_rejects_instances_for_convolution(
    mail: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "p.json"
    assert main(["infer", "convolution", str(mail), "--quantum", "5s", "--out", str(out)]) == 0
    (tmp_path / "i.parquet").write_bytes(b"")
    capsys.readouterr()
    assert main(["eval", str(out), str(mail), "--instances", str(tmp_path / "i.parquet")]) == 1
    assert _error(capsys).startswith("error: ")


def test_a_run_on_few_messages_an_edge_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """63 messages an edge (mail.toml at 1,000 messages, where 14 of 37 true paths are
    missed): a note says the paths are hints; at 10,000 messages (625 an edge, all found)
    none. The paths' notation is explained under them."""
    config = Path(__file__).resolve().parents[2] / "samples" / "synth" / "mail.toml"
    for n, few in ((1000, True), (10000, False)):
        trace = tmp_path / f"m{n}.parquet"
        assert main(["synth", str(config), "--messages", str(n), "--out", str(trace), "--quiet"]) == 0
        argv = ["infer", "convolution", str(trace), "--quantum", "2s", "--max-lag", "200s", "--band", "2s"]
        assert main([*argv, "--out", str(tmp_path / f"c{n}.json"), "--show", "3"]) == 0
        out = capsys.readouterr().out
        assert ("messages an edge: below about 500 an edge convolution misses paths" in out) is few
        assert "-[a|b]-> the delays at the node between a message in and the one it causes out" in out
