"""``wirepath demo`` shows the injected delay where it is (checked against the synthetic truth)."""

from __future__ import annotations

import html
import json
import re

import pytest

from tracefmt import ParameterError, TraceFileError
from viz.demo import DEMO_FILES, _check_demo, run_demo

pytestmark = pytest.mark.needs_dot


def _ws2_auth_requests(truth):
    return sum(
        p["count"]
        for p in truth["patterns"]
        if p["root"]["node"] == "WS2" and any(c["node"] == "AUTH" for c in p["root"]["children"])
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo")
    steps: list[str] = []
    return out, run_demo(out, messages=30_000, seed=5, on_step=steps.append), steps


def test_demo_finds_the_injected_delay(demo):
    out, result, steps = demo
    truth = json.loads((out / "slow-truth.json").read_text())
    top = result.diff.changes[0]
    # multitier-slow.toml: WS2 waits 200 ms more between its AUTH call and its AP call.
    assert top["key"] == ["wait", "WS2", "AP*", "AUTH"]
    assert top["change_s"] == pytest.approx(0.200, abs=0.02)
    assert top["requests"] == pytest.approx(_ws2_auth_requests(truth), rel=0.1)
    assert result.diff.requests == truth["instances"]
    # Counted from every request's latency: all of the WS2-with-AUTH requests changed.
    m = re.fullmatch(
        r"WS2 -> AP\*: \+0\.2\d s in ([\d,]+) of ([\d,]+) requests "
        r"\((\d+)% of the ([\d,]+) that pass there\)",
        result.sentence,
    )
    assert m is not None, result.sentence
    assert int(m.group(1).replace(",", "")) == pytest.approx(_ws2_auth_requests(truth), rel=0.1)
    assert int(m.group(2).replace(",", "")) == truth["instances"]
    assert int(m.group(3)) >= 90
    assert top["changed_delta_s"] == pytest.approx(0.200, abs=0.02)
    assert len(steps) >= 5


def test_convolution_sees_the_same_delay(demo):
    out, result, _ = demo
    truth = json.loads((out / "slow-truth.json").read_text())
    top = result.convolution[0]
    # A message from AUTH back to WS2 is followed 200 ms later by WS2's call to an AP.
    assert top["label"] == "AUTH -> WS2 -> AP*"
    assert top["base_s"] == pytest.approx(0.001, abs=0.001)
    assert top["slow_s"] == pytest.approx(0.201, abs=0.003)
    assert top["messages"] == pytest.approx(_ws2_auth_requests(truth), rel=0.15)
    assert result.convolution_sentence().startswith(
        "convolution: at WS2, between AUTH -> WS2 and WS2 -> AP*:"
    )
    # The drawn chains go through that wait: WS2's hop to an AP carries about 201 ms.
    chain = (out / "slow-convolution.dot").read_text()
    assert re.search(r'"c0n3" -> "c0n4" \[label="[\d,]+ msgs\\nafter 20\d(\.\d+)? ms', chain)


def test_demo_writes_every_file_it_names(demo):
    out, result, _ = demo
    for key, path in result.files.items():
        assert (out / path.split("/")[-1]).stat().st_size > 100, key
    report = (out / "report.html").read_text()
    assert html.escape(result.sentence) in report
    diff_dot = (out / "diff.dot").read_text()
    assert 'color="red3"' in diff_dot
    assert (out / "diff.png").read_bytes().startswith(b"\x89PNG")
    # The slowest pattern of the slow run is WS2 calling AUTH, then AP*.
    assert result.top_patterns[0]["root"]["node"] == "WS2"
    assert [c["node"] for c in result.top_patterns[0]["root"]["children"]] == ["AUTH", "AP*"]


def test_demo_without_its_workloads_says_so(tmp_path):
    with pytest.raises(TraceFileError, match="the demo's workload is missing"):
        run_demo(tmp_path, configs=(tmp_path / "a.toml", tmp_path / "b.toml"))
    with pytest.raises(ParameterError, match="at least 1000 messages"):
        run_demo(tmp_path, messages=10)


def test_demo_writes_exactly_the_files_it_lists(demo):
    out, _, _ = demo
    assert sorted(p.name for p in out.iterdir()) == sorted([*DEMO_FILES, ".wirepath-demo"])


def test_a_demo_may_write_again_where_a_demo_wrote(demo):
    out, _, _ = demo
    _check_demo(out, 30_000, 2.0, None, force=False)  # its own directory: no refusal


def test_the_demo_refuses_a_users_file_of_its_names_unless_forced(tmp_path):
    (tmp_path / "notes.txt").write_text("not the demo's: it never touches it")
    _check_demo(tmp_path, 30_000, 2.0, None, force=False)
    (tmp_path / "base.parquet").write_text("the user's")
    with pytest.raises(ParameterError, match=r"base\.parquet exists and an earlier demo did not write it"):
        _check_demo(tmp_path, 30_000, 2.0, None, force=False)
    _check_demo(tmp_path, 30_000, 2.0, None, force=True)
