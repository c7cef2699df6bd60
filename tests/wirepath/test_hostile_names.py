"""Names from packets reach the terminal and the pictures as text, never as commands: a
node named with terminal escapes, a bell, a newline or a right-to-left override is shown
escaped by every verb that prints names, and the SVG drawn from it is well-formed XML."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pytest

from tracefmt import printable, write_trace
from wirepath.cli import main

#: What a Host header or a DNS name could carry: a colour, a title (OSC ... BEL), a
#: newline that would fake a row of output, a right-to-left override.
EVIL = "web\x1b[31mRED\x1b]0;pwned\x07"
FAKE = "db\nfake row 999"
RTL = "cache\u202etxt.exe"
CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u202e]")


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _trace(path: Path, slow_ms: float = 0.0) -> Path:
    """Requests client -> EVIL -> FAKE and EVIL -> RTL, a few hundred of them."""
    ms = 1_000_000
    rows = []
    for k in range(300):
        t0 = k * 20 * ms
        rid = 10 * k
        rows += [
            (t0, "call", "client", EVIL, rid),
            (t0 + 1 * ms, "call", EVIL, FAKE, rid + 1),
            (t0 + 3 * ms + int(slow_ms * ms), "return", FAKE, EVIL, rid + 1),
            (t0 + 4 * ms + int(slow_ms * ms), "call", EVIL, RTL, rid + 2),
            (t0 + 5 * ms + int(slow_ms * ms), "return", RTL, EVIL, rid + 2),
            (t0 + 7 * ms + int(slow_ms * ms), "return", EVIL, "client", rid),
        ]
    table = pa.table(
        {
            "timestamp": pa.array([r[0] for r in rows], pa.int64()).cast(pa.timestamp("ns", tz="UTC")),
            "sender": [r[2] for r in rows],
            "receiver": [r[3] for r in rows],
            "op": [r[1] for r in rows],
            "id": pa.array([r[4] for r in rows], pa.uint64()),
        }
    )
    write_trace(table, path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    base, slow = _trace(d / "base.parquet"), _trace(d / "slow.parquet", slow_ms=2.0)
    out = {"dir": d, "base": base, "slow": slow}
    for name in ("base", "slow"):
        paths = d / f"{name}.json"
        assert main(["infer", "nesting", str(out[name]), "--out", str(paths), "--show", "0"]) == 0
        out[f"{name}_paths"] = paths
    return out


def _shows_names_escaped(out: str) -> None:
    assert not CONTROL.search(out), repr(out)
    assert not any(line.startswith("fake row") for line in out.splitlines())
    assert printable(EVIL) in out


def test_printable_escapes_what_would_act() -> None:
    assert printable(EVIL) == "web\\x1b[31mRED\\x1b]0;pwned\\x07"
    assert printable(FAKE) == "db\\nfake row 999"
    assert printable(RTL) == "cache\\u202etxt.exe"


@pytest.mark.parametrize(
    "verb",
    ["info", "infer nesting --show", "infer convolution", "viz diff"],
)
def test_verbs_print_names_escaped(capsys, files, verb) -> None:
    d = files["dir"]
    argv = {
        "info": ["info", files["base"]],
        "infer nesting --show": ["infer", "nesting", files["base"], "--out", d / "n.json", "--show", "3"],
        "infer convolution": [
            "infer",
            "convolution",
            files["base"],
            "--quantum",
            "1ms",
            "--root",
            "client",
            "--out",
            d / "c.json",
            "--show",
            "5",
        ],
        "viz diff": ["viz", "diff", files["base_paths"], files["slow_paths"], "--out", d / "diff.dot"],
    }[verb]
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    _shows_names_escaped(out)
    if verb != "infer convolution":  # its paths may not name every node
        assert printable(FAKE) in out


def test_json_output_keeps_the_names_as_they_are(capsys, files) -> None:
    # Machines get the data itself (JSON escapes it); only text for people is escaped.
    rc, out, _ = run(capsys, "info", files["base"], "--json")
    assert rc == 0
    assert EVIL in json.loads(out)["nodes"]


@pytest.mark.needs_dot
def test_svg_of_hostile_names_is_well_formed(capsys, files) -> None:
    svg = files["dir"] / "draw.svg"
    rc, _, _ = run(capsys, "viz", "draw", files["base_paths"], "--out", svg)
    assert rc == 0
    root = ET.parse(svg).getroot()  # raises on XML that is not well-formed
    text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
    assert "\\x1b[31mRED" in text


def test_trend_names_are_escaped(capsys, tmp_path) -> None:
    parent, current = tmp_path / "parent.txt", tmp_path / "current.txt"
    name = "ip4\x1b[2J\nfake-test"
    parent.write_text(json.dumps({name: [10.0, 10.1, 9.9, 10.0]}))
    current.write_text(json.dumps({name: [5.0, 5.1, 4.9, 5.0]}))
    rc, out, _ = run(capsys, "trend", "compare", "--parent-file", parent, "--current-file", current)
    assert rc in (0, 1)
    assert not CONTROL.search(out), repr(out)
    assert "ip4\\x1b[2J\\nfake-test" in out
