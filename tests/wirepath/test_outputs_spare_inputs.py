"""No verb writes over what it reads: an output named like an input (or like another
output, or like the temporary file an output is written to first) is refused with one
line and exit 1, and the input stays byte for byte as it was."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tracefmt
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
PCAP = ROOT / "samples" / "testbed" / "web.pcap"
CONFIG = ROOT / "samples" / "synth" / "multitier.toml"


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A trace, its paths file and instances, a capture and a synth configuration."""
    d = tmp_path_factory.mktemp("made")
    trace, paths, inst = d / "t.parquet", d / "p.json", d / "i.parquet"
    assert main(["synth", str(CONFIG), "--messages", "4000", "--out", str(trace)]) == 0
    assert main(["infer", "nesting", str(trace), "--out", str(paths), "--instances", str(inst)]) == 0
    shutil.copy(PCAP, d / "w.pcap")
    shutil.copy(CONFIG, d / "cfg.toml")
    return {"trace": trace, "paths": paths, "instances": inst, "pcap": d / "w.pcap", "config": d / "cfg.toml"}


#: Each case: the argv (names of ``made`` in braces), and the input it must spare.
CASES = {
    "capture pcap --out the capture": (["capture", "pcap", "{pcap}", "--out", "{pcap}"], "pcap"),
    "infer nesting --out the trace": (["infer", "nesting", "{trace}", "--out", "{trace}"], "trace"),
    "infer nesting --instances the trace": (
        ["infer", "nesting", "{trace}", "--out", "{dir}/x.json", "--instances", "{trace}"],
        "trace",
    ),
    "infer convolution --out the trace": (
        ["infer", "convolution", "{trace}", "--quantum", "1ms", "--out", "{trace}"],
        "trace",
    ),
    "report --out the paths": (["report", "{paths}", "--out", "{paths}"], "paths"),
    "report --out the truth": (
        ["report", "{paths}", "--truth", "{trace}", "--instances", "{instances}", "--out", "{trace}"],
        "trace",
    ),
    "export --out the instances": (
        ["export", "{instances}", "--format", "otlp", "--out", "{instances}"],
        "instances",
    ),
    "viz draw --out the paths": (["viz", "draw", "{paths}", "--out", "{paths}"], "paths"),
    "viz diff --out an input": (["viz", "diff", "{paths}", "{paths}", "--out", "{paths}"], "paths"),
    "synth --truth the configuration": (
        ["synth", "{config}", "--out", "{dir}/s.parquet", "--truth", "{config}"],
        "config",
    ),
    "synth --pcap the configuration": (
        ["synth", "{config}", "--out", "{dir}/s.parquet", "--pcap", "{config}"],
        "config",
    ),
    # The configuration is named like a temporary file of s.parquet (which a sweep of a
    # killed run's leftovers would remove).
    "synth --out whose temporary file is the input": (
        ["synth", "{dir}/.s.parquet.k1ll3d_1.partial", "--out", "{dir}/s.parquet"],
        "partial",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_output_never_replaces_an_input(capsys, made, case) -> None:
    argv, spared = CASES[case]
    names = {**{k: str(v) for k, v in made.items()}, "dir": str(made["trace"].parent)}
    args = [a.format(**names) for a in argv]
    if spared == "partial":
        spared_path = made["trace"].parent / ".s.parquet.k1ll3d_1.partial"
        shutil.copy(CONFIG, spared_path)
    else:
        spared_path = made[spared]
    before = spared_path.read_bytes()
    listing = sorted(p.name for p in spared_path.parent.iterdir())
    rc, _, err = run(capsys, *args)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "output would overwrite" in lines[0]
    assert lines[0].startswith("error: ")
    assert spared_path.read_bytes() == before
    assert sorted(p.name for p in spared_path.parent.iterdir()) == listing


def test_two_outputs_of_synth_may_not_share_a_name(capsys, made, tmp_path) -> None:
    out = tmp_path / "t.parquet"
    rc, _, err = run(capsys, "synth", made["config"], "--out", out, "--truth", out)
    assert rc == 1
    assert err.strip().splitlines() == [f"error: {out}: given for two outputs; choose another name for one"]
    assert not out.exists()


@pytest.mark.parametrize("verb", ["capture", "merge"])
def test_a_parquet_trace_is_not_written_under_a_text_name(capsys, made, tmp_path, verb) -> None:
    out = tmp_path / "x.txt"
    argv = {
        "capture": ["capture", "pcap", made["pcap"], "--out", out],
        "merge": ["merge", f"a={made['trace']}", "--out", out],
    }[verb]
    rc, _, err = run(capsys, *argv)
    assert rc == 1
    lines = err.strip().splitlines()
    why = "this writes a Parquet trace: name it .parquet or .pq (wirepath convert makes text of it)"
    assert lines == [f"error: {out}: {why}"]
    assert not out.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "{trace}", "--edges", "-1"],
        ["infer", "nesting", "{trace}", "--out", "{dir}/n.json", "--top", "-1"],
        ["infer", "nesting", "{trace}", "--out", "{dir}/n.json", "--show", "-2"],
        ["viz", "draw", "{paths}", "--top", "0"],
        ["export", "{instances}", "--format", "otlp", "--out", "{dir}/o.json", "--max-traces", "-1"],
    ],
    ids=["info --edges", "infer --top", "infer --show", "draw --top", "export --max-traces"],
)
def test_negative_counts_are_refused(capsys, made, argv) -> None:
    # A negative count would act as a Python slice: all but the last few.
    names = {**{k: str(v) for k, v in made.items()}, "dir": str(made["trace"].parent)}
    rc, _, err = run(capsys, *(a.format(**names) for a in argv))
    assert rc == 2
    assert "is out of range (a whole number >=" in err.strip().splitlines()[-1]


def test_eval_of_instances_from_another_trace_is_one_error(capsys, made, tmp_path) -> None:
    other = tmp_path / "other.parquet"
    assert main(["synth", str(CONFIG), "--messages", "4000", "--seed", "9", "--out", str(other)]) == 0
    capsys.readouterr()
    rc, _, err = run(capsys, "eval", made["paths"], other, "--instances", made["instances"])
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert "inferred from another trace" in lines[0]


def test_demo_into_a_file_is_one_error(capsys, tmp_path) -> None:
    target = tmp_path / "afile"
    target.write_text("keep me")
    rc, _, err = run(capsys, "demo", "--out", target)
    assert rc == 1
    assert err.strip().splitlines() == [
        f"error: {target} is a file: the demo writes a directory (give --out a new name)"
    ]
    assert target.read_text() == "keep me"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            [
                "infer",
                "nesting",
                "{trace}",
                "--out",
                "{dir}/z.json",
                "--preset",
                "paper",
                "--smooth-bins",
                "1e9",
            ],
            "smooth_bins",
        ),
        (
            [
                "infer",
                "convolution",
                "{trace}",
                "--quantum",
                "1ms",
                "--band",
                "1e6s",
                "--out",
                "{dir}/z.json",
            ],
            "band_s",
        ),
    ],
    ids=["smooth", "band"],
)
def test_settings_that_would_take_all_memory_are_refused(capsys, made, argv, expected) -> None:
    # --smooth-bins 1e9 and --band 1e6 asked numpy for 60-97 GiB.
    names = {**{k: str(v) for k, v in made.items()}, "dir": str(made["trace"].parent)}
    rc, _, err = run(capsys, *(a.format(**names) for a in argv))
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {expected}")


def _gz(tmp_path: Path, damage: str) -> Path:
    import gzip

    data = gzip.compress(PCAP.read_bytes())
    path = tmp_path / f"{damage}.pcap.gz"
    if damage == "cut":
        path.write_bytes(data[: len(data) // 2])
    else:  # the stored CRC-32 no longer matches
        broken = bytearray(data)
        broken[-6] ^= 0xFF
        path.write_bytes(bytes(broken))
    return path


@pytest.mark.parametrize("damage", ["cut", "crc"])
def test_a_damaged_gzip_keeps_the_packets_before_the_damage(capsys, tmp_path, damage) -> None:
    out = tmp_path / "t.parquet"
    rc, text, _ = run(capsys, "capture", "pcap", _gz(tmp_path, damage), "--out", out)
    assert rc == 0
    said = {"cut": "compressed data cut or damaged", "crc": "gzip data corrupt (CRC check failed)"}
    assert said[damage] in text
    kept = tracefmt.read_trace(out).num_rows
    whole = tmp_path / "whole.parquet"
    assert main(["capture", "pcap", str(PCAP), "--out", str(whole)]) == 0
    assert 0 < kept <= tracefmt.read_trace(whole).num_rows


@pytest.mark.parametrize("case", ["directory", "empty", "long", "names is a directory", "parent is a file"])
def test_an_output_that_cannot_be_written_is_one_error(capsys, tmp_path, case) -> None:
    (tmp_path / "d.parquet").mkdir()
    (tmp_path / "afile").write_text("")
    out = {
        "directory": tmp_path / "d.parquet",
        "empty": "",
        "long": tmp_path / ("x" * 300 + ".parquet"),
        "names is a directory": tmp_path / "t.parquet",
        "parent is a file": tmp_path / "afile" / "t.parquet",
    }[case]
    extra = ["--names", str(tmp_path / "d.parquet")] if case == "names is a directory" else []
    rc, _, err = run(capsys, "capture", "pcap", PCAP, "--out", out, *extra)
    assert rc == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")


def test_outputs_are_not_world_writable_whatever_the_umask(capsys, made, tmp_path) -> None:
    import os
    import stat

    old = os.umask(0)
    try:
        trace, paths = tmp_path / "t.parquet", tmp_path / "p.json"
        assert main(["capture", "pcap", str(made["pcap"]), "--out", str(trace)]) == 0
        assert (
            main(
                [
                    "infer",
                    "nesting",
                    str(trace),
                    "--out",
                    str(paths),
                    "--instances",
                    str(tmp_path / "i.parquet"),
                ]
            )
            == 0
        )
        assert main(["convert", str(trace), str(tmp_path / "t.txt")]) == 0
    finally:
        os.umask(old)
    for name in ("t.parquet", "p.json", "i.parquet", "t.txt"):
        assert not stat.S_IMODE((tmp_path / name).stat().st_mode) & 0o002, name
