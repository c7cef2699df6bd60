"""``wirepath capture pcap`` in-process: output, JSON, names, points, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tracefmt
from wirepath.cli import main

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "pcaps"
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data/pcaps is not present")


@needs_data
def test_capture_pcap_writes_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.parquet"
    assert main(["capture", "pcap", str(DATA / "zeek/http_get.pcap"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "wrote 2 messages" in text
    t = tracefmt.read_trace(out)
    assert t["op"].to_pylist() == ["call", "return"]
    assert t["sender"].to_pylist()[0] == t["receiver"].to_pylist()[1]
    assert t["label"].to_pylist()[0].startswith("GET ")
    assert set(t.column_names) >= {"bytes", "flow", "proto", "label", "point"}


@needs_data
def test_names_service_mode_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.parquet"
    names = tmp_path / "names.toml"
    # http_get: client 141.142.228.5 talks to 192.150.187.43:80
    names.write_text('"192.150.187.43:80" = "web"\n"141.142.0.0/16" = "campus"\n')
    argv = ["capture", "pcap", str(DATA / "zeek/http_get.pcap"), "--out", str(out), "--names", str(names)]
    assert main([*argv, "--node-by", "service", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["messages"] == 2
    assert doc["messages_by_proto"] == {"http": 2}
    t = tracefmt.read_trace(out)
    assert t["sender"].to_pylist() == ["campus", "web"]
    assert tracefmt.read_trace_metadata(out).provenance["capture"]["packets"] == doc["packets"]


@needs_data
def test_point_from_file_removes_duplicates_and_estimates_offsets(tmp_path: Path) -> None:
    import struct

    src = (DATA / "zeek/http_get.pcap").read_bytes()
    # A second capture point: the same packets, its clock 2.5 ms behind.
    shifted = bytearray(src[:24])
    off = 24
    while off + 16 <= len(src):
        sec, usec, cap, wire = struct.unpack_from("<IIII", src, off)
        t = sec * 1_000_000 + usec - 2500
        shifted += (
            struct.pack("<IIII", t // 1_000_000, t % 1_000_000, cap, wire) + src[off + 16 : off + 16 + cap]
        )
        off += 16 + cap
    b = tmp_path / "b.pcap"
    b.write_bytes(bytes(shifted))
    out = tmp_path / "t.parquet"
    argv = [
        "capture",
        "pcap",
        str(DATA / "zeek/http_get.pcap"),
        str(b),
        "--out",
        str(out),
        "--point-from-file",
    ]
    assert main([*argv, "--json"]) == 0
    meta = tracefmt.read_trace_metadata(out).provenance["capture"]
    assert [p["offset_ns"] for p in meta["points"]] == [0, 2_500_000]
    # Every one of the file's 14 packets was seen at both points (tshark counts 14).
    assert meta["duplicates_removed"] == 14
    assert tracefmt.read_trace(out).num_rows == 2


@pytest.mark.parametrize("content", [b"", b"not a capture at all"], ids=["empty", "wrong-magic"])
def test_bad_files_exit_1_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes
) -> None:
    p = tmp_path / "x.pcap"
    p.write_bytes(content)
    assert main(["capture", "pcap", str(p), "--out", str(tmp_path / "t.parquet")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("error: ")
    assert not (tmp_path / "t.parquet").exists()


@needs_data
def test_payload_only_with_keep_payload(tmp_path: Path) -> None:
    import dpkt

    src = DATA / "zeek/http_get.pcap"
    plain, kept = tmp_path / "plain.parquet", tmp_path / "kept.parquet"
    assert main(["capture", "pcap", str(src), "--out", str(plain)]) == 0
    assert main(["capture", "pcap", str(src), "--out", str(kept), "--keep-payload"]) == 0
    assert "x_payload" not in tracefmt.read_trace(plain).column_names
    # The request as dpkt sees it on the wire: the first client-to-port-80 segment with data.
    with open(src, "rb") as f:
        segs = [dpkt.ethernet.Ethernet(b).data.data for _, b in dpkt.pcap.Reader(f)]
    request = next(t.data for t in segs if t.dport == 80 and t.data)
    rows = tracefmt.read_trace(kept).to_pylist()
    call = next(r for r in rows if r["op"] == "call")
    assert call["x_payload"] == request
    assert len(call["x_payload"]) == call["bytes"]
