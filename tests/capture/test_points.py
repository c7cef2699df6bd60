"""Several capture points: packet-level duplicates, clock offsets, per-point counts.

Two pcap files are written from one known conversation (dpkt builds the packets): the
second point's clock runs at a known offset, each point misses packets the other saw,
and the truth (messages, packets seen at both points) is known by construction.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import dpkt
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from testkit import pcap

import tracefmt
from capture.convert import convert_pcaps, cross_point_duplicates, packet_keys, payload_hashes
from capture.decode import Decoder
from capture.source import PacketBatch
from wirepath.cli import main

C, S = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
SYN, ACK, PSH, FIN = 0x02, 0x10, 0x08, 0x01
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def tcp(
    ts: int, client: bool, seq: int, flags: int, data: bytes = b"", cport: int = 40000
) -> tuple[int, bytes]:
    src, dst = (C, S) if client else (S, C)
    t = dpkt.tcp.TCP(
        sport=cport if client else 80, dport=80 if client else cport, seq=seq, ack=0, flags=flags, data=data
    )
    ip = dpkt.ip.IP(src=src, dst=dst, p=6, data=t)
    ip.len = len(bytes(ip))
    return ts, bytes(ip)


def udp(ts: int, data: bytes, sport: int = 5000, dport: int = 9999) -> tuple[int, bytes]:
    ip = dpkt.ip.IP(src=C, dst=S, p=17, data=dpkt.udp.UDP(sport=sport, dport=dport, data=data))
    ip.len = len(bytes(ip))
    return ts, bytes(ip)


def http_conversation(
    conns: int, turns: int
) -> tuple[list[tuple[int, bytes]], list[tuple[str, str]], set[int]]:
    """Packets of ``conns`` keep-alive HTTP connections; the true (op, label) list; data packet indices."""
    pkts: list[tuple[int, bytes]] = []
    truth: list[tuple[str, str]] = []
    data_idx: set[int] = set()
    t = T0
    for c in range(conns):
        cport = 41000 + c
        cs, ss = 1000 + 7 * c, 90000 + 11 * c
        pkts += [
            tcp(t, True, cs - 1, SYN, cport=cport),
            tcp(t + 2 * MS, False, ss - 1, SYN | ACK, cport=cport),
        ]
        t += 4 * MS
        for k in range(turns):
            req = f"GET /c{c}/t{k} HTTP/1.1\r\nHost: s\r\n\r\n".encode()
            body = f"body {c} {k}".encode()
            resp = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            data_idx.add(len(pkts))
            pkts.append(tcp(t, True, cs, PSH | ACK, req, cport=cport))
            cs += len(req)
            t += 3 * MS
            # The response in two segments, so a point missing one of them breaks the message.
            data_idx.update((len(pkts), len(pkts) + 1))
            pkts.append(tcp(t, False, ss, ACK, resp[:20], cport=cport))
            pkts.append(tcp(t + 2 * MS, False, ss + 20, PSH | ACK, resp[20:], cport=cport))
            ss += len(resp)
            t += 5 * MS
            truth += [("call", f"GET /c{c}/t{k}"), ("return", f"GET /c{c}/t{k}")]
        pkts += [tcp(t, True, cs, FIN | ACK, cport=cport), tcp(t + 2 * MS, False, ss, FIN | ACK, cport=cport)]
        t += 4 * MS
    return pkts, truth, data_idx


def write_pcap(path: Path, pkts: list[tuple[int, bytes]]) -> Path:
    """A nanosecond pcap of raw IP packets."""
    return pcap.write_pcap(path, pkts, pcap.RAW_IP)


def seen(trace: Path) -> list[tuple[str, str]]:
    t = tracefmt.read_trace(trace)
    return sorted(zip(t["op"].to_pylist(), t["label"].to_pylist(), strict=True))


def test_two_points_give_the_conversation_once(tmp_path: Path) -> None:
    rnd = random.Random(6)
    pkts, truth, data_idx = http_conversation(conns=12, turns=4)
    data = sorted(data_idx)
    missing = rnd.sample(data, 16)
    miss_a, miss_b = set(missing[:8]), set(missing[8:])  # no packet is missing at both points
    offset = 3_700_000  # point b's clock is 3.7 ms ahead of point a's
    jitter = 40_000  # and the packets reach it up to 40 us later or earlier
    a = [p for i, p in enumerate(pkts) if i not in miss_a]
    b = [
        (ts + offset + rnd.randint(-jitter, jitter), fr) for i, (ts, fr) in enumerate(pkts) if i not in miss_b
    ]
    extra = udp(T0 + 30 * MS + offset, b"only b saw this")
    b.append(extra)
    pa_, pb = write_pcap(tmp_path / "a.pcap", a), write_pcap(tmp_path / "b.pcap", b)
    out = tmp_path / "t.parquet"
    report = convert_pcaps([pa_, pb], out, point_from_file=True)

    # Exactly the conversation's messages, plus the one datagram only b saw.
    assert seen(out) == sorted([*truth, ("send", None)])
    assert report.gaps == 0
    assert report.retransmitted == 0
    # Every packet both points saw was dropped once; the ones only one point saw were kept.
    both = len(pkts) - len(miss_a) - len(miss_b)
    assert report.duplicates_removed == both
    assert sum(p["duplicates"] for p in report.points) == both
    assert [p["packets"] for p in report.points] == [len(a), len(b)]
    # b's offset: what to add to its clock to get a's, within the jitter.
    assert report.points[1]["point"] == "b"
    assert abs(report.points[1]["offset_ns"] + offset) <= jitter
    meta = tracefmt.read_trace_metadata(out).provenance["capture"]
    assert meta["duplicates_removed"] == both
    assert [p["duplicates"] for p in meta["points"]] == [p["duplicates"] for p in report.points]
    # A message whose first packet only b saw is b's; the datagram is b's.
    t = tracefmt.read_trace(out)
    by_label = {}
    for op, label, point, ts in zip(
        t["op"].to_pylist(),
        t["label"].to_pylist(),
        t["point"].to_pylist(),
        t["timestamp"].cast("int64").to_pylist(),
        strict=True,
    ):
        by_label[(op, label)] = (point, ts)
    assert by_label[("send", None)][0] == "b"
    req_missing_at_a = [i for i in miss_a if dpkt.ip.IP(pkts[i][1]).data.data.startswith(b"GET ")]
    for i in req_missing_at_a:
        label = dpkt.ip.IP(pkts[i][1]).data.data.split(b" HTTP/")[0].decode()
        point, ts = by_label[("call", label)]
        assert point == "b"
        # On a's clock: b's timestamp minus the estimated offset, within the jitter.
        assert abs(ts - pkts[i][0]) <= 2 * jitter
    req_at_both = [
        i for i in data if i not in missing and dpkt.ip.IP(pkts[i][1]).data.data.startswith(b"GET ")
    ]
    for i in req_at_both:
        label = dpkt.ip.IP(pkts[i][1]).data.data.split(b" HTTP/")[0].decode()
        assert by_label[("call", label)][0] in ("a", "b")


def test_equal_sequence_numbers_with_different_payloads_are_both_kept(tmp_path: Path) -> None:
    seq = 5000
    a = [tcp(T0, True, seq, PSH | ACK, b"aaaa-payload")]
    b = [tcp(T0 + 10_000, True, seq, PSH | ACK, b"bbbb-payload")]  # same flow, seq, length; 10 us later
    segs = Decoder().decode(PacketBatch.from_packets(a + b, 101))
    keys = packet_keys(segs)
    assert keys[0] != keys[1]
    assert not cross_point_duplicates(keys, segs.ts_ns, np.array([0, 1]), MS).any()
    report = convert_pcaps(
        [write_pcap(tmp_path / "a.pcap", a), write_pcap(tmp_path / "b.pcap", b)],
        tmp_path / "t.parquet",
        point_from_file=True,
    )
    assert report.duplicates_removed == 0
    # Both reached reassembly, which keeps the first and counts the second as a retransmission.
    assert report.retransmitted == 1
    # The same check for UDP: one flow, two payloads of one length.
    report = convert_pcaps(
        [
            write_pcap(tmp_path / "c.pcap", [udp(T0, b"one")]),
            write_pcap(tmp_path / "d.pcap", [udp(T0 + 5, b"two")]),
        ],
        tmp_path / "u.parquet",
        point_from_file=True,
    )
    assert report.duplicates_removed == 0
    assert report.messages == 2


@pytest.mark.parametrize("b_sees_retransmission", [True, False])
def test_retransmission_at_one_point_is_not_a_cross_point_duplicate(
    tmp_path: Path, b_sees_retransmission: bool
) -> None:
    # 40 turns of 8 ms: the connection is still open when the retransmission comes.
    pkts, truth, data_idx = http_conversation(conns=1, turns=40)
    first_req = min(data_idx)
    ts, frame = pkts[first_req]
    # a saw the request twice: the original, and a retransmission 200 ms later (an RTO),
    # which is far outside the 1 ms window.
    retrans = (ts + 200 * MS, frame)
    a = [*pkts, retrans]
    b = [*pkts, retrans] if b_sees_retransmission else list(pkts)
    report = convert_pcaps(
        [write_pcap(tmp_path / "a.pcap", a), write_pcap(tmp_path / "b.pcap", b)],
        tmp_path / "t.parquet",
        point_from_file=True,
    )
    assert seen(tmp_path / "t.parquet") == sorted(truth)
    assert report.duplicates_removed == len(b)
    assert report.retransmitted == 1
    assert report.points[1]["offset_ns"] == 0


def test_retransmission_within_the_window_at_both_points_is_kept_once() -> None:
    # One point saw the original and a quick retransmission 300 us apart, the other
    # both as well: pair them k-th with k-th, keep two.
    key = np.array([1, 1, 1, 1], np.uint64)
    ts = np.array([0, 300_000, 20_000, 330_000])
    point = np.array([0, 0, 1, 1])
    assert cross_point_duplicates(key, ts, point, MS).tolist() == [False, False, True, True]
    # The other point saw only the retransmission: still two kept.
    assert cross_point_duplicates(key[:3], ts[[0, 1, 3]], point[:3] * 0 + [0, 0, 1], MS).tolist() == [
        False,
        False,
        True,
    ]
    # Outside the window a sighting is its own transmission, whatever point saw it.
    assert cross_point_duplicates(key[:2], np.array([0, 5 * MS]), np.array([0, 1]), MS).tolist() == [
        False,
        False,
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=12))
def test_payload_hash_equal_exactly_for_equal_payloads(payloads: list[bytes]) -> None:
    segs = Decoder().decode(PacketBatch.from_packets([udp(i, p) for i, p in enumerate(payloads)], 101))
    h = payload_hashes(segs).tolist()
    for i in range(len(payloads)):
        for j in range(len(payloads)):
            assert (h[i] == h[j]) == (payloads[i] == payloads[j])


def test_cli_prints_the_duplicates_per_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkts, _, _ = http_conversation(conns=2, turns=1)
    a = write_pcap(tmp_path / "web.pcap", pkts)
    b = write_pcap(tmp_path / "db.pcap", [(ts + 2 * MS, fr) for ts, fr in pkts[:-1]])
    out = tmp_path / "t.parquet"
    assert main(["capture", "pcap", str(a), str(b), "--point-from-file", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    n = len(pkts) - 1
    assert f"point web: the reference clock; 0 of its {len(pkts)} packets were duplicates" in text
    assert (
        f"point db: clock offset -2.000 ms (from 4 messages seen by earlier points too); "
        f"{n} of its {n} packets" in text
    )
    assert f"duplicate packets removed: {n}" in text
    assert main(["capture", "pcap", str(a), str(b), "--point-from-file", "--out", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["duplicates"] for p in doc["points"]] == [0, n]


@pytest.mark.parametrize("batch", [1, 5, 64])
def test_batches_split_anywhere_give_the_same_merge(tmp_path: Path, batch: int) -> None:
    from capture.source import FakeSource

    rnd = random.Random(batch)
    pkts, truth, data_idx = http_conversation(conns=4, turns=3)
    missing = rnd.sample(sorted(data_idx), 6)
    a = [p for i, p in enumerate(pkts) if i not in missing[:3]]
    b = [
        (ts - 7 * MS + rnd.randint(-20_000, 20_000), fr)
        for i, (ts, fr) in enumerate(pkts)
        if i not in missing[3:]
    ]
    # The batches of the two points end at different times, so the merge's cut falls anywhere.
    report = convert_pcaps(
        [
            FakeSource(a, linktype=101, batch_size=batch, name="a"),
            FakeSource(b, linktype=101, batch_size=batch + 2, name="b"),
        ],
        tmp_path / "t.parquet",
        point_from_file=True,
    )
    assert seen(tmp_path / "t.parquet") == sorted(truth)
    assert report.duplicates_removed == len(pkts) - 6
    assert report.retransmitted == 0
    assert abs(report.points[1]["offset_ns"] - 7 * MS) <= 20_000
