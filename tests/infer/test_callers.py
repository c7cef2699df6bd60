"""A service's calls leave from its bare address: given back to the service whose visits
hold them (``infer.callers``), on a real capture checked against its HTTP labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import capture
import infer
import tracefmt
from infer.callers import attribute_callers

ROOT = Path(__file__).resolve().parents[2]
BRIDGE = ROOT / "samples" / "testbed" / "bridge.pcap"


@pytest.fixture(scope="module")
def by_service(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    out = tmp_path_factory.mktemp("bridge") / "t.parquet"
    capture.convert_pcaps([BRIDGE], out, node_by="service")
    return tracefmt.sort_trace(tracefmt.read_trace(out))


def test_the_testbed_capture_nests_once_callers_are_their_services(by_service: pa.Table) -> None:
    """bridge.pcap (samples/testbed): 60 requests from the client; web calls app once
    for a page and twice for a cart (tiers.py). By service, web's and app's calls leave
    from 10.77.0.2 and 10.77.0.3: one-hop patterns only, until they are given back."""
    out, did = attribute_callers(by_service)
    assert did.renamed == {"10.77.0.2 -> 10.77.0.2:8080": 2, "10.77.0.3 -> 10.77.0.3:8081": 2}
    assert did.kept == 0
    result = infer.infer_nesting(by_service)  # which attributes them itself
    assert result.to_json()["stats"]["callers"]["renamed"] == did.renamed
    pairs, names = result.pairs, result.nodes
    roots = np.flatnonzero(result.parent < 0)
    assert len(roots) == 60
    assert {(names[pairs.caller[r]], names[pairs.callee[r]]) for r in roots} == {
        ("10.77.0.1", "10.77.0.2:8080")
    }
    # Each request's calls from web to app, against what its URL says it is: 54 of the
    # 60 are right (at concurrency 2 a cart's second call can hang under a page beside
    # it); with callers by address, none nests at all.
    labels = out["label"].cast(pa.string()).to_pylist()
    to_app = np.bincount(result.parent[result.parent >= 0], minlength=len(pairs))
    right = sum(to_app[r] == (2 if "/cart/" in labels[pairs.call_row[r]] else 1) for r in roots)
    assert right >= 54


def test_without_flows_or_services_nothing_changes(by_service: pa.Table) -> None:
    plain = by_service.drop_columns(["flow"])
    out, did = attribute_callers(plain)
    assert out is plain
    assert not did.renamed
    assert not did.kept
    by_address = by_service.set_column(
        1, "sender", pa.array([s.split(":")[0] for s in by_service["sender"].cast(pa.string()).to_pylist()])
    )
    by_address = by_address.set_column(
        2,
        "receiver",
        pa.array([s.split(":")[0] for s in by_address["receiver"].cast(pa.string()).to_pylist()]),
    )
    out, did = attribute_callers(tracefmt.validate_trace(by_address))
    assert not did.renamed
    assert not did.kept


def test_a_connection_its_calls_do_not_place_keeps_its_address() -> None:
    """Two services on one address, both with a visit open whenever the connection
    calls: nothing tells them apart, so the caller stays the address, and says so."""
    rows = []
    for t in range(0, 3000, 100):
        for svc, flow in (("h:80", 1), ("h:81", 2)):
            rows += [(t, "call", "c", svc, flow), (t + 50, "return", svc, "c", flow)]
        rows += [(t + 10, "call", "h", "db:5432", 9), (t + 20, "return", "db:5432", "h", 9)]
    rows.sort()
    ts, op, s, r, f = zip(*rows, strict=True)
    t = tracefmt.validate_trace(
        pa.table(
            {
                "timestamp": pa.array(ts, pa.timestamp("ns")),
                "sender": s,
                "receiver": r,
                "op": op,
                "id": pa.nulls(len(ts), pa.uint64()),
                "flow": pa.array(f, pa.uint64()),
            }
        )
    )
    out, did = attribute_callers(t)
    assert (did.renamed, did.kept) == ({}, 1)
    assert "h" in out["sender"].cast(pa.string()).to_pylist()
    assert "kept its address as caller: a client on that host" in did.lines()[0]
