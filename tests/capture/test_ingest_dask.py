"""``capture pcap`` split by flow (a Dask cluster): the trace of the conversion in one process.

The flows are split into shards; every shard reads and decodes every packet and
reassembles its own flows (``capture.flows.flow_shards``). The trace must be the same row
for row, and the counters the same, whatever the batches: so the comparisons read the
captures in small chunks (many batches, connections carried from one to the next).

The cheap checks run the shards one after the other in this process, over every shared
capture and the generated ones; the slow ones use a real local cluster of two worker
processes, started once for the module.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from testkit.pcap import write_pcap

import capture
import tracefmt
from capture.frames import tcp_frame
from tracefmt.cluster import open_runner
from wirepath.cli import main

# A local cluster's scheduler serves HTTP on port 8787 even without a dashboard; when that
# port is taken (the module's cluster while the CLI test starts its own) dask moves to a
# free port, warns, and leaves the socket of its first try to the garbage collector.
pytestmark = [
    pytest.mark.filterwarnings(r"ignore:Port \d+ is already in use:UserWarning"),
    pytest.mark.filterwarnings(
        r"ignore:Exception ignored in. <socket\.socket:pytest.PytestUnraisableExceptionWarning"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "pcaps"
if not DATA.is_dir():
    DATA = Path("/work/shared/data/pcaps")
FILES = sorted(p for p in DATA.glob("*/*") if p.suffix not in (".result", ".txt")) if DATA.is_dir() else []
needs_data = pytest.mark.skipif(not FILES, reason="../shared/data/pcaps is not present")
# A few shared captures with something to get wrong: tunnels, VLAN copies, IPv6, DNS
# over UDP and TCP, pipelining, a missing handshake, gaps, retransmissions, HTTP/2.
SOME = [
    "chrissanders/dns_lab.pcapng",
    "chrissanders/http_ip4and6.pcapng",
    "chrissanders/tcp_retransmissions.pcapng",
    "grpc_packt/Unary.pcapng",
    "zeek/erspan.pcap",
    "zeek/mixed-vlan-mpls.pcap",
    "zeek/http_1000-requests-one-dropped-response.pcap",
    "zeek/tcp_missing-syn.pcap",
    "zeek/redis_excessive-pipelining.pcap",
]
CHUNK = 1 << 12  # bytes per batch: many batches even for the small captures
# The bigger generated captures in bigger batches (still dozens of them), for time's sake.
CHUNKS = {"synth": 1 << 15, "points": 1 << 14}
T0 = 1_700_000_000_000_000_000
SERVER_PORT = 45000  # not a well-known port, and above the clients': only a SYN tells the server


def keep_alive(conversations: int, *, requests: int = 3) -> list[tuple[int, bytes]]:
    """HTTP keep-alive conversations (as the ingest benchmark's) that overlap in time, to a
    server port only SYNs reveal; conversations go in pairs with the same timestamps, so
    messages of two flows share a timestamp. Time-sorted (timestamp ns, Ethernet frame)."""
    frame, req, resp = (
        tcp_frame,
        b"GET /item/%d HTTP/1.1\r\nHost: s\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    )
    out = []
    for c in range(conversations):
        cli, srv = 0x0A000100 | (c % 50), 0x0A000200 | (c % 3)
        sp, cs, ss = 1024 + c, 1000 * c + 1, 7_000_000 + 1000 * c
        pk = [
            frame(cli, srv, sp, SERVER_PORT, cs, 0, 0x02, b""),
            frame(srv, cli, SERVER_PORT, sp, ss, cs + 1, 0x12, b""),
        ]
        cs, ss = cs + 1, ss + 1
        pk.append(frame(cli, srv, sp, SERVER_PORT, cs, ss, 0x10, b""))
        for r in range(requests):
            q = req % r
            pk.append(frame(cli, srv, sp, SERVER_PORT, cs, ss, 0x18, q))
            cs += len(q)
            pk.append(frame(srv, cli, SERVER_PORT, sp, ss, cs, 0x18, resp))
            ss += len(resp)
        pk += [
            frame(cli, srv, sp, SERVER_PORT, cs, ss, 0x11, b""),
            frame(srv, cli, SERVER_PORT, sp, ss, cs + 1, 0x11, b""),
        ]
        start = T0 + (c // 2) * 30_000  # 30 us between pairs; a conversation lasts 110 us
        out += [(start + 10_000 * i, f) for i, f in enumerate(pk)]
    return sorted(out, key=lambda p: p[0])


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict[str, list[Path]]:
    """Generated captures by case: rotated (one capture in two files, connections open
    across the cut), midway (the capture starts inside connections: no handshake seen),
    synth (``wirepath synth --pcap``: a connection per call), points (two capture points)."""
    d = tmp_path_factory.mktemp("gen")
    pk = keep_alive(300)
    half = len(pk) // 2
    synth = d / "synth.pcap"
    sample = ROOT / "samples" / "synth" / "multitier.toml"
    argv = ["synth", str(sample), "--messages", "3000", "--out", str(d / "s.parquet"), "--pcap", str(synth)]
    assert main([*argv, "--quiet"]) == 0
    # Point b: a clock 2.5 ms later, missing every seventh packet; point a misses every fifth.
    a = [p for i, p in enumerate(pk) if i % 5]
    b = [(t + 2_500_000, f) for i, (t, f) in enumerate(pk) if i % 7]
    return {
        "rotated": [write_pcap(d / "cap-0.pcap", pk[:half]), write_pcap(d / "cap-1.pcap", pk[half:])],
        "midway": [write_pcap(d / "midway.pcap", pk[37:])],
        "synth": [synth],
        "points": [write_pcap(d / "web.pcap", a), write_pcap(d / "db.pcap", b)],
    }


def _plain(t: pa.Table) -> pa.Table:
    """The trace with dictionary columns decoded: a dictionary's order depends on how the
    rows were cut into pieces while writing, not on the messages."""
    cols = {
        c: t[c].cast(t[c].type.value_type) if pa.types.is_dictionary(t[c].type) else t[c]
        for c in t.column_names
    }
    return pa.table(cols)


def _counters(report: capture.CaptureReport) -> dict:
    doc = report.to_json()
    del doc["seconds"], doc["output"]
    return doc


def _same(here: Path, there: Path, r_here: capture.CaptureReport, r_there: capture.CaptureReport) -> pa.Table:
    a, b = tracefmt.read_trace(here), tracefmt.read_trace(there)
    assert a.schema == b.schema
    assert _plain(b).equals(_plain(a))
    assert _counters(r_there) == _counters(r_here)
    assert r_there.messages == a.num_rows
    assert not list(there.parent.glob(".*shards-*"))  # the shard files are gone
    return a


def _convert_both(files: list[Path], tmp_path: Path, runner=None, **kw) -> pa.Table:
    """The trace and counters in one process, and split by flow (with ``runner``, or as
    three shards here): the same."""
    kw.setdefault("chunk_bytes", CHUNK)
    here = tmp_path / "here.parquet"
    r_here = capture.convert_pcaps(files, here, **kw)
    there = tmp_path / "there.parquet"
    r_there = capture.convert_pcaps(files, there, runner=runner, **({} if runner else {"shards": 3}), **kw)
    return _same(here, there, r_here, r_there)


# ---- the shards one after the other, in this process (cheap) ---------------------------------
@needs_data
@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(DATA)) for p in FILES])
def test_shards_in_one_process_give_the_trace_of_one(path: Path, tmp_path: Path) -> None:
    _convert_both([path], tmp_path)


@pytest.mark.parametrize("case", ["rotated", "midway", "synth", "points"])
def test_shards_of_generated_captures_give_the_trace_of_one(case, generated, tmp_path: Path) -> None:
    t = _convert_both(
        generated[case], tmp_path, point_from_file=case == "points", chunk_bytes=CHUNKS.get(case, CHUNK)
    )
    assert t.num_rows > 100
    if case == "midway":
        # The listener rule: a connection seen without its handshake is oriented by the
        # SYNs other connections sent to its server (whose port is above the client's).
        calls = t.filter(pa.compute.equal(t["op"].cast(pa.string()), "call"))
        senders = set(calls["sender"].cast(pa.string()).to_pylist())
        assert len(senders) == 50
        assert all(s.startswith("10.0.1.") for s in senders)


def test_without_a_syn_anywhere_the_lower_port_is_taken_for_the_server(tmp_path: Path) -> None:
    # What the listener rule changes in the midway capture: alone, without any SYN to
    # its server, a connection seen mid-way is oriented by its ports, here wrongly.
    lone = write_pcap(tmp_path / "lone.pcap", keep_alive(2)[6:])  # both handshakes cut
    capture.convert_pcaps([lone], tmp_path / "t.parquet")
    t = tracefmt.read_trace(tmp_path / "t.parquet")
    calls = t.filter(pa.compute.equal(t["op"].cast(pa.string()), "call"))
    assert calls.num_rows
    assert all(s.startswith("10.0.2.") for s in calls["sender"].cast(pa.string()).to_pylist())


def test_ties_between_flows_are_ordered_by_flow(generated, tmp_path: Path) -> None:
    # Conversations in pairs share timestamps: the order of their messages must not
    # depend on when each connection was over (the batches).
    out = tmp_path / "t.parquet"
    capture.convert_pcaps(generated["rotated"], out, chunk_bytes=CHUNK)
    t = tracefmt.read_trace(out)
    ts, flow = t["timestamp"].cast(pa.int64()).to_numpy(), t["flow"].to_numpy()
    tie = ts[1:] == ts[:-1]
    assert tie.sum() > 50
    assert (flow[1:][tie] > flow[:-1][tie]).all()
    big = tmp_path / "big.parquet"
    capture.convert_pcaps(generated["rotated"], big)  # one batch
    assert _plain(tracefmt.read_trace(big)).equals(_plain(t))


def test_shard_count_is_checked(tmp_path: Path) -> None:
    with pytest.raises(tracefmt.ParameterError, match="at least 1"):
        capture.convert_pcaps([capture.FakeSource([])], tmp_path / "t.parquet", shards=0)


# ---- a real cluster of two worker processes --------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    with open_runner(workers=2) as run:
        yield run


@pytest.mark.slow
@needs_data
def test_cluster_gives_the_trace_of_one_process(cluster, tmp_path: Path) -> None:
    assert cluster.width == 2
    for name in SOME:
        _convert_both([DATA / name], tmp_path / name.replace("/", "-"), runner=cluster)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["rotated", "midway", "synth", "points"])
def test_cluster_gives_the_trace_of_one_process_generated(case, cluster, generated, tmp_path: Path) -> None:
    _convert_both(
        generated[case],
        tmp_path,
        runner=cluster,
        point_from_file=case == "points",
        chunk_bytes=CHUNKS.get(case, CHUNK),
    )


@pytest.mark.slow
def test_cluster_with_payload_names_and_partition(cluster, generated, tmp_path: Path) -> None:
    files = generated["rotated"]
    kw = {"chunk_bytes": CHUNK, "keep_payload": True, "node_by": "service", "partition": "400"}
    here, there = tmp_path / "here", tmp_path / "there"
    r_here = capture.convert_pcaps(files, here, **kw)
    r_there = capture.convert_pcaps(files, there, runner=cluster, **kw)
    parts = sorted(p.name for p in here.iterdir())
    assert len(parts) > 4
    assert sorted(p.name for p in there.iterdir()) == parts
    for name in parts:
        if name.startswith("part-"):
            assert _plain(tracefmt.read_trace(there / name)).equals(_plain(tracefmt.read_trace(here / name)))
    t = _same(here, there, r_here, r_there)
    assert "x_payload" in t.column_names


@pytest.mark.slow
def test_cli_workers(generated, tmp_path: Path, capsys) -> None:
    files = [str(f) for f in generated["rotated"]]
    here, there = tmp_path / "here.parquet", tmp_path / "there.parquet"
    assert main(["capture", "pcap", *files, "--out", str(here), "--json"]) == 0
    doc_here = json.loads(capsys.readouterr().out)
    assert main(["capture", "pcap", *files, "--out", str(there), "--workers", "2", "--json"]) == 0
    doc_there = json.loads(capsys.readouterr().out)
    for doc in (doc_here, doc_there):
        del doc["seconds"], doc["output"]
    assert doc_there == doc_here
    assert _plain(tracefmt.read_trace(there)).equals(_plain(tracefmt.read_trace(here)))
