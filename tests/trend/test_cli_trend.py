"""The trend verbs end to end: import, analyze, check, from-paths, from-capture, and bad input."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tracefmt import Store
from tracefmt.patterns import path_id, text_id
from trend import load_series
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples" / "trend"
PCAPS = ROOT.parent / "shared" / "data" / "pcaps"
if not PCAPS.is_dir():  # a clone elsewhere: the captures stay at /work/shared
    PCAPS = Path("/work/shared/data/pcaps")


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory):
    store = tmp_path_factory.mktemp("store")
    assert main(["trend", "import", str(SAMPLES / "mrr.csv"), "--store", str(store)]) == 0
    assert main(["trend", "import", str(SAMPLES / "latency.json"), "--store", str(store)]) == 0
    return store


def test_import_summary(tmp_path, capsys):
    assert main(["trend", "import", str(SAMPLES / "mrr.csv"), "--store", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["series"], doc["runs"], doc["trials"], doc["failed_trials"]) == (4, 360, 1800, 6)
    assert Path(doc["output"]).parent == tmp_path / "results"


def test_analyze_finds_the_planted_changes(sample_store, capsys):
    assert main(["trend", "analyze", "--store", str(sample_store), "--json"]) == 0
    doc = {s["test"]: s for s in json.loads(capsys.readouterr().out)["series"]}
    assert doc["l2bdbase-64b-2c"]["regressed"]
    assert doc["l2bdbase-64b-2c"]["runs_in_last_group"] == 6
    assert doc["checkout-p50"]["regressed"]  # a latency that went up
    assert doc["ip6base-78b-1c"]["progressions"] >= 1
    assert not doc["ip6base-78b-1c"]["regressed"]
    assert not doc["ip4base-64b-1c"]["regressed"]
    failed = [r for r in doc["ip4base-64b-1c"]["runs"] if r["mark"] == "failed"]
    assert [r["build"] for r in failed] == ["1087"]
    assert doc["l2bdbase-64b-2c"]["short_change"] == pytest.approx(-0.06, abs=0.01)


def test_analyze_tmm_text(sample_store, capsys):
    assert main(["trend", "analyze", "--store", str(sample_store), "--method", "tmm", "--test", "ip4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["test", "testbed", "runs", "trend"]
    assert {line.split()[0] for line in out[1:]} == {"ip4-ipsec-1518b-1c", "ip4base-64b-1c"}


def test_check_exit_status_and_alert(sample_store, tmp_path, capsys):
    alert = tmp_path / "alert.md"
    assert main(["trend", "check", "--store", str(sample_store), "--alert", str(alert)]) == 1
    text = alert.read_text()
    assert text.startswith("## wirepath trend: 2 regressed tests")
    assert "| l2bdbase-64b-2c | 3n-icx | 1084 (2026-10-13)" in text
    assert "checkout-p50" in text
    capsys.readouterr()
    assert main(["trend", "check", "--store", str(sample_store), "--test", "ip6"]) == 0
    assert "no regressions" in capsys.readouterr().out


def test_from_paths_one_series_per_pattern_and_visit(tmp_path, capsys):
    paths = tmp_path / "paths.json"
    assert main(["infer", "nesting", str(ROOT / "samples" / "multitier.txt"), "--out", str(paths)]) == 0
    doc = json.loads(paths.read_text())
    store = tmp_path / "store"
    for build in ("1", "2"):
        assert (
            main(
                [
                    "trend",
                    "from-paths",
                    str(paths),
                    "--store",
                    str(store),
                    "--build",
                    build,
                    "--time",
                    f"2024-11-2{build}T00:00:00Z",
                    "--min-count",
                    "1",
                ]
            )
            == 0
        )
    capsys.readouterr()
    series = {s.test: s for s in load_series(store)}

    def visits(node):
        return sum(1 + visits(c) for c in node["children"])

    assert len(series) == sum(1 + visits(p["root"]) for p in doc["patterns"])
    first = doc["patterns"][0]
    # Named by the shape (whose id the pattern's is), each visit by its call.
    (name,) = [t for t in series if "/" not in t and text_id(t.removeprefix("path:")) == first["id"]]
    root = series[name]
    assert root.runs == 2
    assert root.direction == "smaller-is-better"
    assert root.values[0] == first["root"]["latency_s"]["mean"]
    child = first["root"]["children"][0]
    assert series[f"{name}/{child['caller']}>{child['node']}"].values[0] == child["latency_s"]["mean"]


def test_from_paths_of_convolution_paths(tmp_path, capsys):
    doc = {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "trace": {"end": "2024-01-01T00:00:00Z"},
        "paths": [
            {
                "id": "p7",
                "nodes": ["a", "b", "c", "d"],
                "delays_s": [[0.5, 2.0], [1.5]],
                "counts": [10, 9, 8],
                "latency_s": 2.25,
            },
            {"nodes": ["a", "e", "f"], "delays_s": [[0.25]], "counts": [3, 2]},
            # An answer hop: its median (between the two peaks) is the path's delay there,
            # and a series of its own beside the hop's most frequent delay.
            {"nodes": ["x", "y", "x"], "delays_s": [[0.001, 0.009]], "medians_s": [0.006], "counts": [4, 4]},
        ],
    }
    paths = tmp_path / "conv.json"
    paths.write_text(json.dumps(doc))
    assert main(["trend", "from-paths", str(paths), "--store", str(tmp_path), "--build", "1"]) == 0
    got = {s.test: s.values[0] for s in load_series(tmp_path)}
    # Named by their nodes, each hop by its two; the path id in the tags.
    assert got == {
        "path:a>b>c>d": 2.25,
        "path:a>b>c>d/a>b": 0.5,
        "path:a>b>c>d/b>c": 1.5,
        "path:a>e>f": 0.25,
        "path:a>e>f/a>e": 0.25,
        "path:x>y>x": 0.006,
        "path:x>y>x/x>y": 0.001,
        "path:x>y>x/x>y/median": 0.006,
    }
    tags = {
        t
        for s in pq.read_table(next((tmp_path / "results").glob("*.parquet")))["tags"].to_pylist()
        for t in s
    }
    assert {"path:p7", f"path:{path_id(['a', 'e', 'f'])}", "at:1"} <= tags


def test_from_paths_takes_the_trace_end_as_time(tmp_path, capsys):
    paths = tmp_path / "p.json"
    paths.write_text(
        json.dumps(
            {
                "format": "wirepath.paths/1",
                "algorithm": "nesting",
                "trace": {"end": "2024-01-01T00:00:02Z"},
                "patterns": [
                    {
                        "id": "x",
                        "count": 1,
                        "total_latency_s": 0.5,
                        "root": {"node": "A", "caller": "c", "latency_s": {"mean": 0.5}, "children": []},
                    }
                ],
            }
        )
    )
    assert (
        main(
            ["trend", "from-paths", str(paths), "--store", str(tmp_path), "--build", "7", "--min-count", "1"]
        )
        == 0
    )
    (s,) = load_series(tmp_path)
    assert s.times_ns.tolist() == [1704067202 * 10**9]


def _write_pcap(path: Path, times_s: list[float]) -> None:
    """A classic microsecond pcap of minimal Ethernet frames at the given instants."""
    frame = bytes(14) + bytes(46)
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)]
    for t in times_s:
        sec, usec = divmod(round(t * 1e6), 1_000_000)
        out.append(struct.pack("<IIII", sec, usec, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


def test_from_capture_counts_packets_per_trial(tmp_path, capsys):
    rng = np.random.default_rng(4)
    # 3 trials of 1 s from t=100: 500, 300 and 800 packets, plus some outside.
    times = np.concatenate(
        [100 + rng.random(500), 101 + rng.random(300), 102 + rng.random(800), [99.5, 103.2]]
    )
    pcap = tmp_path / "rx.pcap"
    _write_pcap(pcap, sorted(times.tolist()))
    argv = [
        "trend",
        "from-capture",
        str(pcap),
        "--store",
        str(tmp_path / "s"),
        "--test",
        "ip4",
        "--build",
        "b1",
        "--start",
        "100",
        "--trials",
        "3",
        "--duration",
        "1s",
        "--json",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["trials"], doc["unit"]) == ([500.0, 300.0, 800.0], "pps")
    (s,) = load_series(tmp_path / "s")
    assert (s.unit, s.direction, s.trials[0].tolist()) == ("pps", "bigger-is-better", [500.0, 300.0, 800.0])


def test_from_capture_of_an_empty_capture(tmp_path, capsys):
    pcap = tmp_path / "empty.pcap"
    _write_pcap(pcap, [])
    argv = ["trend", "from-capture", str(pcap), "--store", str(tmp_path), "--test", "x", "--build", "1"]
    assert main(argv) == 1
    assert "holds no packets" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed")
def test_from_capture_agrees_with_tshark_on_a_real_capture(tmp_path, capsys):
    pcap = PCAPS / "chrissanders" / "http_espn.pcapng"
    out = subprocess.run(
        ["tshark", "-r", str(pcap), "-T", "fields", "-e", "frame.time_epoch"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    t = np.array([float(x) for x in out])
    # Trials of 0.5 s from the first packet, as tshark sees them.
    want = [((t >= t[0] + 0.5 * k) & (t < t[0] + 0.5 * (k + 1))).sum() / 0.5 for k in range(4)]
    argv = [
        "trend",
        "from-capture",
        str(pcap),
        "--store",
        str(tmp_path),
        "--test",
        "espn",
        "--build",
        "1",
        "--trials",
        "4",
        "--duration",
        "500ms",
        "--json",
    ]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["trials"] == want


def test_from_capture_reads_a_trace_at_one_point(tmp_path, capsys, make_table):
    import pyarrow as pa

    from tracefmt import write_trace

    rows = [(10**9 + k * 10**8, "send", "a", "b", None) for k in range(20)]
    trace = make_table(rows, point=pa.array(["sw1", "sw2"] * 10))
    path = tmp_path / "t.parquet"
    write_trace(trace, path)
    argv = [
        "trend",
        "from-capture",
        str(path),
        "--store",
        str(tmp_path),
        "--test",
        "x",
        "--build",
        "1",
        "--point",
        "sw1",
        "--trials",
        "2",
        "--duration",
        "1s",
        "--json",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["trials"], doc["unit"]) == ([5.0, 5.0], "msg/s")
    argv[argv.index("sw1")] = "sw9"
    assert main(argv) == 1
    assert "no messages at point 'sw9' (points: sw1, sw2)" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["analyze", "--store", "{empty}"], "no series in"),
        (["analyze", "--store", "{missing}"], "not a wirepath store with results"),
        (["import", "{bad_csv}", "--store", "{empty}"], "missing column 'time'"),
        (["import", "{nofile}", "--store", "{empty}"], "no such file"),
        (["from-paths", "{bad_csv}", "--store", "{empty}", "--build", "1"], "not JSON"),
        (["from-capture", "{nofile}", "--store", "{empty}", "--test", "x", "--build", "1"], ""),
        (["check", "--store", "{empty}", "--method", "iqr"], None),
        (["import", "{good_csv}", "--store", "{good_csv}"], "cannot write"),
    ],
    ids=[
        "no-series",
        "no-store",
        "bad-csv",
        "no-file",
        "paths-not-json",
        "no-capture",
        "bad-method",
        "store-is-file",
    ],
)
def test_bad_input_one_line(argv, message, tmp_path, capsys):
    empty = tmp_path / "empty"
    Store.create(empty)
    bad_csv = tmp_path / "bad.csv"
    bad_csv.write_text("test,build,value\nip4,1,2\n")
    good_csv = tmp_path / "good.csv"
    good_csv.write_text("test,build,time,value\nip4,1,0,2\n")
    names = {
        "good_csv": good_csv,
        "empty": empty,
        "missing": tmp_path / "missing",
        "bad_csv": bad_csv,
        "nofile": tmp_path / "no.pcap",
    }
    code = main(["trend", *[a.format(**names) for a in argv]])
    err = capsys.readouterr().err
    if message is None:  # a usage error
        assert code == 2
        return
    assert code == 1
    assert err.startswith("error: ")
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_from_capture_leaves_out_trials_the_capture_does_not_hold(tmp_path, capsys):
    """5.3 s of steady traffic, 10 trials of 1 s asked: five measured, the five past the
    end left out (they were stored as 0 pps and halved the mean), and said so."""
    pcap = tmp_path / "short.pcap"
    _write_pcap(pcap, [1000 + k / 1000 for k in range(5300)])  # 1,000 pps for 5.3 s
    argv = ["trend", "from-capture", str(pcap), "--store", str(tmp_path / "s"), "--test", "ip4"]
    argv += ["--build", "1", "--trials", "10", "--duration", "1s"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    trials = ", ".join(["1,000"] * 5)
    assert f"MRR of ip4 build 1: 1,000 pps, packets received per second (trials {trials})" in out
    assert "note: 5 of 10 trials left out: the capture's packets span 5.299 s" in out
    (s,) = load_series(tmp_path / "s")
    assert s.trials[0].tolist() == [1000.0] * 5
    assert main([*argv, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trials_left_out"] == [5, 6, 7, 8, 9]


def test_from_capture_with_no_whole_trial_is_one_error(tmp_path, capsys):
    pcap = tmp_path / "short.pcap"
    _write_pcap(pcap, [1000 + k / 1000 for k in range(300)])  # 0.3 s
    argv = ["trend", "from-capture", str(pcap), "--store", str(tmp_path / "s"), "--test", "ip4"]
    assert main([*argv, "--build", "1", "--duration", "1s"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "its packets span 299 ms, which holds none of the 10 trials of 1 s" in err[0]
    assert not (tmp_path / "s").exists() or not list((tmp_path / "s").rglob("*.parquet"))


def test_from_capture_point_of_a_trace_without_points(tmp_path, capsys, make_table):
    """A one-point capture leaves 'point' empty: --point gets a sentence, not 'points: None'."""
    import pyarrow as pa

    from tracefmt import write_trace

    rows = [(10**9 + k * 10**8, "send", "a", "b", None) for k in range(20)]
    path = tmp_path / "t.parquet"
    write_trace(make_table(rows, point=pa.array([None] * 20, pa.string())), path)
    argv = ["trend", "from-capture", str(path), "--store", str(tmp_path), "--test", "x", "--build", "1"]
    assert main([*argv, "--point", "nginx"]) == 1
    err = capsys.readouterr().err
    assert "names no capture point (its 'point' column is empty" in err
    assert "None" not in err
