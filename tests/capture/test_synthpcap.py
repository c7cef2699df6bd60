"""Synthetic traces rendered as packets, checked with Wireshark's dissectors (tshark) and dpkt."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import dpkt
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testkit.pcap import epoch_ns, tshark_rows

import synth
import tracefmt
from capture import convert_pcaps
from capture.synthpcap import default_names_path, node_addresses, render_pcap, write_names_file
from wirepath.cli import main

ROOT = Path(__file__).resolve().parents[2]
MULTITIER = ROOT / "samples" / "synth" / "multitier.toml"
TS = pa.timestamp("ns", tz="UTC")

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark")


def _trace(rows: list[tuple[int, str, str, str, int | None]], **extra: list) -> pa.Table:
    cols = {
        "timestamp": pa.array([r[0] for r in rows], pa.int64()).cast(TS),
        "sender": pa.array([r[2] for r in rows], pa.string()),
        "receiver": pa.array([r[3] for r in rows], pa.string()),
        "op": pa.array([r[1] for r in rows], pa.string()),
        "id": pa.array([r[4] for r in rows], pa.uint64()),
    }
    cols.update({k: pa.array(v, pa.uint64()) for k, v in extra.items()})
    return tracefmt.validate_trace(pa.table(cols))


def _tshark(pcap: Path, display: str, *fields: str) -> list[list[str]]:
    """tshark's fields, with the IP and TCP checksums verified."""
    checks = ("-o", "tcp.check_checksum:TRUE", "-o", "ip.check_checksum:TRUE")
    return tshark_rows(pcap, display, *fields, options=checks)


@pytest.fixture(scope="module")
def multitier(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, Path, dict[str, str]]:
    config = replace(synth.load_config(MULTITIER), messages=600, duration_s=None, seed=3)
    trace, _ = synth.generate_table(config)
    pcap = tmp_path_factory.mktemp("synthpcap") / "multitier.pcap"
    report = render_pcap(trace, pcap, names_file=default_names_path(pcap))
    names = tracefmt.load_names(report.names_file)
    return trace, pcap, names


def _segments(pcap: Path) -> list[tuple[float, dpkt.Packet]]:
    """(timestamp, TCP segment or UDP datagram) of every packet, read with dpkt."""
    with pcap.open("rb") as f:
        return [(float(ts), dpkt.ethernet.Ethernet(buf).data.data) for ts, buf in dpkt.pcap.Reader(f)]


def _messages(t: pa.Table) -> list[tuple]:
    """A trace's messages as sorted (timestamp ns, sender, receiver, op)."""
    cols = [t["timestamp"].cast(pa.int64()), t["sender"], t["receiver"], t["op"]]
    return sorted(zip(*(c.to_pylist() for c in cols), strict=True))


@needs_tshark
def test_every_call_is_an_http_request_at_its_timestamp(multitier: tuple) -> None:
    trace, pcap, names = multitier
    rows = _tshark(pcap, "http.request", "frame.time_epoch", "ip.src", "ip.dst", "tcp.checksum.status")
    calls = trace.filter(tracefmt.op_codes(trace) == tracefmt.OP_CALL)
    seen = sorted((epoch_ns(t), names[s], names[d]) for t, s, d, _ in rows)
    want = sorted(
        zip(
            calls["timestamp"].cast(pa.int64()).to_pylist(),
            calls["sender"].to_pylist(),
            calls["receiver"].to_pylist(),
            strict=True,
        )
    )
    assert seen == want
    assert {r[3] for r in rows} == {"1"}  # Wireshark's checksum status 1: good (0 bad, 2 unverified)


@needs_tshark
def test_every_return_is_the_response_to_its_call(multitier: tuple) -> None:
    trace, pcap, names = multitier
    rows = _tshark(pcap, "http.response", "frame.time_epoch", "ip.src", "ip.dst", "http.time")
    ts = trace["timestamp"].cast(pa.int64()).to_numpy()
    op = tracefmt.op_codes(trace)
    call = trace["true_call"].to_numpy()
    call_ts = dict(
        zip(call[op == tracefmt.OP_CALL].tolist(), ts[op == tracefmt.OP_CALL].tolist(), strict=True)
    )
    want = sorted(
        (int(t), s, d, int(t) - call_ts[c])
        for t, s, d, c, o in zip(
            ts, trace["sender"].to_pylist(), trace["receiver"].to_pylist(), call, op, strict=True
        )
        if o == tracefmt.OP_RETURN
    )
    # Wireshark matches each response with its request and reports the time between them.
    seen = sorted((epoch_ns(t), names[s], names[d], round(float(dt) * 1e9)) for t, s, d, dt in rows)
    assert [w[:3] for w in want] == [s[:3] for s in seen]
    assert np.allclose([w[3] for w in want], [s[3] for s in seen], atol=1000)


@needs_tshark
def test_tcp_is_clean_for_wireshark(multitier: tuple) -> None:
    _, pcap, _ = multitier
    out = subprocess.run(
        ["tshark", "-n", "-q", "-r", str(pcap), "-z", "expert,warn"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # No warnings or errors: no unseen segments, bad checksums or malformed HTTP.
    assert "Warnings (" not in out
    assert "Errors (" not in out
    syns = _tshark(pcap, "tcp.flags == 0x002", "tcp.stream")
    fins = _tshark(pcap, "tcp.flags.fin == 1", "tcp.stream")
    assert len(fins) == 2 * len(syns) == 2 * len({s[0] for s in syns})


_PARTS = {
    "one-row": lambda t: t.slice(5, 1),
    "middle": lambda t: t.slice(200, 150),
    "empty": lambda t: t.slice(0, 0),
    "without-DB1": lambda t: t.filter(
        pc.and_(
            pc.not_equal(pc.cast(t["sender"], pa.string()), "DB1"),
            pc.not_equal(pc.cast(t["receiver"], pa.string()), "DB1"),
        )
    ),
}


@needs_tshark
@pytest.mark.parametrize("part", list(_PARTS))
def test_part_of_a_trace_renders_as_the_pcap_of_that_part(
    multitier: tuple, tmp_path: Path, part: str
) -> None:
    """A sliced or filtered table keeps every node name in its dictionaries; only the rows
    it holds go on the wire, and Wireshark finds exactly those messages."""
    trace = _PARTS[part](multitier[0])
    pcap = tmp_path / "part.pcap"
    report = render_pcap(trace, pcap, names_file=tmp_path / "part.names.toml")
    names = tracefmt.load_names(report.names_file)
    want = _messages(trace)
    seen = [
        (epoch_ns(t), names[s], names[d], op)
        for display, op in (("http.request", "call"), ("http.response", "return"), ("udp", "send"))
        for t, s, d in _tshark(pcap, display, "frame.time_epoch", "ip.src", "ip.dst")
    ]
    assert sorted(seen) == want
    assert set(report.addresses) == {n for _, s, d, _ in want for n in (s, d)}


def test_pcap_reads_back_with_dpkt(tmp_path: Path) -> None:
    trace = _trace(
        [
            (1_000_000_123, "call", "client", "WS1", 5),
            (1_000_500_000, "call", "WS1", "DB1", 6),
            (1_000_900_000, "return", "DB1", "WS1", 6),
            (1_002_000_000, "return", "WS1", "client", 5),
            (1_003_000_000, "send", "WS1", "log", 9),
        ]
    )
    pcap = tmp_path / "t.pcap"
    report = render_pcap(trace, pcap)
    assert (report.packets, report.connections, report.datagrams) == (19, 2, 1)
    with pcap.open("rb") as f:
        reader = dpkt.pcap.Reader(f)
        assert reader.datalink() == dpkt.pcap.DLT_EN10MB
        packets = [(ts, dpkt.ethernet.Ethernet(buf)) for ts, buf in reader]
    assert len(packets) == report.packets
    data = [(ts, e.data) for ts, e in packets if len(e.data.data.data)]
    # Requests, responses and the datagram carry the messages' timestamps, in time order.
    assert [float(ts) for ts, _ in data] == pytest.approx(
        [1.000000123, 1.0005, 1.0009, 1.002, 1.003], abs=1e-9
    )
    first = data[0][1].data.data
    assert first.startswith(b"POST /WS1 HTTP/1.1\r\n")
    head, _, body = first.partition(b"\r\n\r\n")
    assert b"X-Wirepath-Call: 00000000000000000005" in head
    length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
    assert length == len(body)
    assert isinstance(data[-1][1].data, dpkt.udp.UDP)
    assert data[-1][1].data.data.startswith(b"SEND WS1 log 00000000000000000009")


def test_a_lost_call_leaves_a_gap_and_a_lost_return_no_response(tmp_path: Path) -> None:
    trace = _trace(
        [(1_000_000, "call", "a", "b", 1), (3_000_000, "return", "b", "a", 2)],
        true_call=[1, 2],
    )
    report = render_pcap(trace, tmp_path / "t.pcap")
    assert (report.connections, report.missing_requests, report.missing_responses) == (2, 1, 1)
    segs = [seg for _, seg in _segments(tmp_path / "t.pcap")]
    payload = [s for s in segs if s.data]
    assert [p.data[:4] for p in payload] == [b"POST", b"HTTP"]
    # The lost request's bytes are missing from the client's sequence space: the response
    # acknowledges more than the client ever sent on that connection.
    resp = payload[1]
    client_sent = [s for s in segs if s.dport == resp.sport and s.sport == resp.dport]
    syn = next(s for s in client_sent if s.flags & dpkt.tcp.TH_SYN)
    assert resp.ack - (syn.seq + 1) > 0
    assert all(not s.data for s in client_sent)


def test_reused_ids_pair_in_time_order(tmp_path: Path) -> None:
    trace = _trace(
        [
            (1_000, "call", "a", "b", 7),
            (2_000, "call", "a", "b", 7),
            (5_000, "return", "b", "a", 7),
            (9_000, "return", "b", "a", 7),
        ]
    )
    pcap = tmp_path / "t.pcap"
    report = render_pcap(trace, pcap)
    assert (report.connections, report.missing_requests, report.missing_responses) == (2, 0, 0)
    data = [(ts, s) for ts, s in _segments(pcap) if s.data]
    req_port = {s.sport: ts for ts, s in data if s.data.startswith(b"POST")}
    resp_port = {s.dport: ts for ts, s in data if s.data.startswith(b"HTTP")}
    pairs = sorted((round(req_port[p] * 1e9), round(resp_port[p] * 1e9)) for p in req_port)
    assert pairs == [(1_000, 5_000), (2_000, 9_000)]


def test_duplicates_go_on_the_wire_once(tmp_path: Path) -> None:
    trace = _trace(
        [(1_000, "call", "a", "b", 1), (1_020, "call", "a", "b", 1), (5_000, "return", "b", "a", 1)],
        true_call=[1, 1, 1],
    )
    report = render_pcap(trace, tmp_path / "t.pcap")
    assert (report.connections, report.duplicates, report.packets) == (1, 1, 9)


def test_empty_trace_gives_an_empty_pcap(tmp_path: Path) -> None:
    report = render_pcap(_trace([]), tmp_path / "e.pcap")
    assert report.packets == 0
    with (tmp_path / "e.pcap").open("rb") as f:
        assert list(dpkt.pcap.Reader(f)) == []


def test_bad_parameters_and_unwritable_output(tmp_path: Path) -> None:
    trace = _trace([(1, "send", "a", "b", None)])
    with pytest.raises(tracefmt.ParameterError, match="gap_ns 0 must be at least 1"):
        render_pcap(trace, tmp_path / "t.pcap", gap_ns=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(tracefmt.TraceFileError, match=r"is a file, not a directory to write t\.pcap in"):
        render_pcap(trace, tmp_path / "file" / "t.pcap")
    with pytest.raises(tracefmt.SchemaError):
        render_pcap(pa.table({"x": [1]}), tmp_path / "t.pcap")


def test_chunking_does_not_change_the_file(tmp_path: Path) -> None:
    config = replace(synth.load_config(MULTITIER), messages=300, duration_s=None, seed=5)
    trace, _ = synth.generate_table(config)
    render_pcap(trace, tmp_path / "a.pcap", chunk_packets=7)
    render_pcap(trace, tmp_path / "b.pcap")
    assert (tmp_path / "a.pcap").read_bytes() == (tmp_path / "b.pcap").read_bytes()


def test_addresses_and_names_file(tmp_path: Path) -> None:
    addrs = node_addresses([f"n{k}" for k in range(600)])
    assert addrs["n0"] == ("10.0.0.1", 8000)
    assert addrs["n249"] == ("10.0.0.250", 8249)
    assert addrs["n250"] == ("10.0.1.1", 8250)
    assert len({a for a, _ in addrs.values()}) == 600
    path = write_names_file({'we"ird': ("10.0.0.1", 8000)}, tmp_path / "n.toml")
    assert tracefmt.load_names(path) == {"10.0.0.1": 'we"ird'}


def test_cli_synth_writes_the_pcap_and_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, pcap = tmp_path / "t.parquet", tmp_path / "t.pcap"
    argv = ["synth", str(MULTITIER), "--messages", "200", "--out", str(out), "--pcap", str(pcap), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    trace = tracefmt.read_trace(out)
    calls = int((tracefmt.op_codes(trace) == tracefmt.OP_CALL).sum())
    assert doc["pcap"]["connections"] == calls
    assert doc["pcap"]["packets"] == 9 * calls
    assert Path(doc["pcap"]["names_file"]) == tmp_path / "t.names.toml"
    names = tracefmt.load_names(tmp_path / "t.names.toml")
    assert set(names.values()) == set(trace["sender"].to_pylist()) | set(trace["receiver"].to_pylist())
    assert main(["synth", str(MULTITIER), "--messages", "50", "--out", str(out), "--pcap", str(pcap)]) == 0
    assert "TCP connections" in capsys.readouterr().out


def test_end_to_end_synth_pcap_convert_infer_eval(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """synth -> packets -> capture pcap -> infer nesting -> eval against the synthetic truth."""
    truth, pcap, conv = tmp_path / "t.parquet", tmp_path / "t.pcap", tmp_path / "c.parquet"
    synth_args = ["synth", str(MULTITIER), "--messages", "5000", "--parallelism", "2", "--seed", "1"]
    assert main([*synth_args, "--out", str(truth), "--pcap", str(pcap)]) == 0
    names = tmp_path / "t.names.toml"
    assert main(["capture", "pcap", str(pcap), "--names", str(names), "--out", str(conv)]) == 0
    capsys.readouterr()
    # The decoders find exactly the synthetic messages: same instants, nodes and ops.
    want, got = tracefmt.read_trace(truth), tracefmt.read_trace(conv)
    assert _messages(got) == _messages(want)
    assert set(got["proto"].to_pylist()) == {"http"}
    reports = []
    for trace in (conv, truth):
        paths = tmp_path / f"{trace.stem}.paths.json"
        assert main(["infer", "nesting", str(trace), "--out", str(paths)]) == 0
        capsys.readouterr()
        assert main(["eval", str(paths), str(truth), "--json"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    from_packets, from_truth = reports
    # Every true pattern is found from the packets, the most frequent one first ...
    assert from_packets["patterns"]["true"] == 16
    assert from_packets["patterns"]["false_negatives"] == 0
    assert from_packets["top_n"][0]["missing"] == 0
    # ... and the wire adds no error: inference scores as it does on the synthetic trace itself.
    assert from_packets == from_truth


@st.composite
def _rpc_traces(draw: st.DrawFn) -> pa.Table:
    """Random RPCs (and one-way sends) between a few nodes, unique ids, nothing lost."""
    nodes = ["client", "WS1", "AP1", "DB1", "log"]
    rows: list[tuple[int, str, str, str, int | None]] = []
    for k in range(draw(st.integers(0, 12))):
        a, b = draw(st.lists(st.sampled_from(nodes), min_size=2, max_size=2, unique=True))
        t = draw(st.integers(10_000, 10**9))
        if draw(st.booleans()):
            rows.append((t, "send", a, b, k))
        else:
            rows.append((t, "call", a, b, k))
            rows.append((t + draw(st.integers(10_000, 10**7)), "return", b, a, k))
    rows.sort(key=lambda r: r[0])
    return _trace(rows)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=_rpc_traces())
def test_rendered_packets_decode_back_into_the_trace(trace: pa.Table, tmp_path: Path) -> None:
    """Property: the capture decoders rebuild exactly the messages that were rendered."""
    pcap = tmp_path / "p.pcap"
    render_pcap(trace, pcap, names_file=tmp_path / "p.names.toml")
    convert_pcaps([pcap], tmp_path / "p.parquet", names=tmp_path / "p.names.toml")
    assert _messages(tracefmt.read_trace(tmp_path / "p.parquet")) == _messages(trace)
