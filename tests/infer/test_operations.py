"""Operations: labels with their ids folded (``infer.operations``), and each visit of a
pattern listing its most frequent ones, checked on a real capture's URLs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import capture
import infer
import tracefmt
from infer.operations import operation_codes, operations
from viz.paths import tree_lines

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("label", "op"),
    [
        ("GET /item/7", "GET /item/:id"),
        ("GET /item/7/", "GET /item/:id/"),
        ("GET /a/1/2/3", "GET /a/:id/:id/:id"),
        ("GET /search?q=7&page=2", "GET /search"),
        ("GET /u/3f2504e0-4f89-11d3-9a0c-0305e82c3301/cart", "GET /u/:id/cart"),
        ("GET /blob/9f86d081884c7d65", "GET /blob/:id"),
        ("GET /v2/items", "GET /v2/items"),  # a word with a digit is not an id
        ("GET /abc", "GET /abc"),  # 3 hex digits: a word, not an id
        ("GET", "GET"),
        ("SELECT users", "SELECT users"),
        ("/shop.Cart/Add", "/shop.Cart/Add"),
        ("A 7", "A 7"),  # no slash before it: not a path segment
    ],
)
def test_ids_are_folded_and_nothing_else(label: str, op: str) -> None:
    assert operations(pa.array([label])).to_pylist() == [op]


def test_codes_share_an_operation() -> None:
    codes, names = operation_codes(pa.chunked_array([["GET /a/1", None], ["GET /a/2", "PUT /b"]]))
    assert codes.tolist() == [0, -1, 0, 1]
    assert names == ["GET /a/:id", "PUT /b"]


def test_each_visit_says_its_operations_on_the_testbed_capture(tmp_path: Path) -> None:
    """bridge.pcap: a page is GET /page/N at web, one GET /api/item/N at app; a cart is
    GET /cart/N, GET /api/item/N then GET /api/price/N (samples/testbed/tiers.py)."""
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([ROOT / "samples" / "testbed" / "bridge.pcap"], out, node_by="service")
    result = infer.infer_nesting(tracefmt.read_trace(out))
    doc = result.to_json()
    by_root = {}
    for p in doc["patterns"]:
        top = p["root"]["ops"][0]["op"]
        by_root.setdefault(top, []).append(p)
    assert set(by_root) == {"GET /page/:id", "GET /cart/:id"}
    page = max(by_root["GET /page/:id"], key=lambda p: p["count"])
    assert [c["ops"] for c in page["root"]["children"]] == [[{"op": "GET /api/item/:id", "share": 1.0}]]
    cart = max(by_root["GET /cart/:id"], key=lambda p: p["count"])
    assert [c["ops"][0]["op"] for c in cart["root"]["children"]] == [
        "GET /api/item/:id",
        "GET /api/price/:id",
    ]
    assert "[GET /cart/:id]" in tree_lines(cart)[0]
    tracefmt.check_paths(doc)
    # The filtered result keeps them.
    kept, _, _ = result.confident(0.5)
    assert kept.to_json()["patterns"][0]["root"]["ops"]


def test_by_label_gives_each_endpoint_patterns_of_its_own(tmp_path: Path) -> None:
    out = tmp_path / "t.parquet"
    capture.convert_pcaps([ROOT / "samples" / "testbed" / "bridge.pcap"], out, node_by="service")
    trace = tracefmt.read_trace(out)
    plain = infer.infer_nesting(trace)
    by = infer.infer_nesting(trace, by_label=True)
    # The same parents; the patterns split by operation, every visit named with its own.
    assert (plain.parent == by.parent).all()
    assert sum(p.count for p in by.patterns) == sum(p.count for p in plain.patterns) == 60
    roots = {p["root"]["node"] for p in by.to_json()["patterns"]}
    assert roots == {"10.77.0.2:8080 GET /page/:id", "10.77.0.2:8080 GET /cart/:id"}
    for p in by.to_json()["patterns"]:
        stack = [p["root"]]
        while stack:
            v = stack.pop()
            assert v["node"].endswith(" " + v["ops"][0]["op"]), v["node"]
            stack += v["children"]
    assert "[" not in tree_lines(by.to_json()["patterns"][0])[0]  # the name says it already
