"""The HTML report in a real headless Chromium: loads clean, sorts by clicking, escapes names."""

from __future__ import annotations

import re
from dataclasses import replace
from fnmatch import fnmatch
from pathlib import Path

import pytest

import infer
import synth
from viz.report import build_report, inline_svg


@pytest.fixture(scope="module")
def demo_page(runs, tmp_path_factory):
    page = build_report(runs["slow"]["doc"], base=runs["base"]["doc"], collapse=["AP*", "DB*"], top=8)
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _merged_shapes(doc, globs=("AP*", "DB*")) -> int:
    """Distinct pattern shapes once replicas are renamed by their glob (by hand, here)."""

    def name(n: str) -> str:
        return next((g for g in globs if fnmatch(n, g)), n)

    def shape(v) -> str:
        return f"{name(v['node'])}(" + ",".join(shape(c) for c in v["children"]) + ")"

    return len({shape(p["root"]) for p in doc["patterns"]})


def _column(driver, table_id, k):
    rows = driver.find_elements("css selector", f"#{table_id} tbody tr")
    return [float(r.find_elements("tag name", "td")[k].get_attribute("data-sort")) for r in rows]


@pytest.mark.browser
@pytest.mark.needs_dot
def test_report_loads_clean_and_sorts_by_clicking(open_page, demo_page, runs, tmp_path):
    page = open_page(demo_page)
    driver = page.driver
    assert page.console_errors() == []
    counts = _column(driver, "patterns", 3)
    shown = min(8, _merged_shapes(runs["slow"]["doc"]))
    assert shown >= 3
    assert len(counts) == shown
    totals = _column(driver, "patterns", 5)  # after count and the share exactly right
    assert totals == sorted(totals, reverse=True)  # as written: by total latency
    header = driver.find_element("css selector", '#patterns th[data-col="3"]')
    header.click()
    assert _column(driver, "patterns", 3) == sorted(counts, reverse=True)
    header.click()
    assert _column(driver, "patterns", 3) == sorted(counts)
    driver.find_element("css selector", '#patterns th[data-col="1"]').click()
    ids = [r.text for r in driver.find_elements("css selector", "#patterns tbody tr td:nth-child(2)")]
    assert ids == sorted(ids, reverse=True)
    # Every pattern has its picture, plus the diff graph; the sentence names WS2's AP call.
    assert len(driver.find_elements("css selector", "div.svg svg")) == shown + 1
    sentence = driver.find_element("css selector", "p.sentence").text
    assert re.match(r"WS2 -> AP\*: \+0\.2\d s in [\d,]+ of [\d,]+ requests", sentence)
    assert page.console_errors() == []
    shot = page.screenshot(tmp_path / "report.png")
    assert shot.stat().st_size > 20_000


@pytest.mark.browser
@pytest.mark.needs_dot
def test_reliability_diagram_in_the_browser(open_page, runs, tmp_path):
    # With the truth, the report compares the stated confidence with it: one dot per
    # bin of the reliability table, at the bin's mean stated and share right.
    import infer

    slow = runs["slow"]
    report = infer.evaluate_paths(slow["doc"], slow["trace"], instances=slow["result"].instances_table())
    path = tmp_path / "reliability.html"
    path.write_text(build_report(slow["doc"], evaluation=report), encoding="utf-8")
    page = open_page(path)
    driver = page.driver
    assert page.console_errors() == []
    bins = report["confidence"]["calls"]["bins"]
    dots = driver.find_elements("css selector", "#reliability-diagram svg circle")
    assert len(dots) == len(bins) > 0
    rows = driver.find_elements("css selector", "#reliability tbody tr")
    assert [float(r.find_elements("tag name", "td")[1].get_attribute("data-sort")) for r in rows] == [
        b["calls"] for b in bins
    ]
    # The diagram is drawn, not empty: the largest bin's dot is the largest.
    radii = [float(d.get_attribute("r")) for d in dots]
    assert radii.index(max(radii)) == max(range(len(bins)), key=lambda k: bins[k]["calls"])
    assert page.screenshot(tmp_path / "reliability.png").stat().st_size > 10_000


@pytest.mark.needs_dot
def test_report_is_self_contained(demo_page):
    html = demo_page.read_text(encoding="utf-8")
    # No external resource: no src= at all, and hrefs only to anchors or the empty icon.
    assert " src=" not in html
    hrefs = set(re.findall(r'href="([^"]*)"', html))
    assert all(h.startswith("#") or h == "data:," for h in hrefs)


@pytest.mark.browser
@pytest.mark.needs_dot
def test_a_node_named_script_shows_as_text(open_page, docs, tmp_path):
    evil = "<script>document.title='pwned'</script>"
    v = docs.visit
    doc = docs.paths_doc(("e" * 16, 3, v(evil, "client & co", 0.01, None, v("DB<1>", evil, 0.005, 0.001))))
    doc["params"] = {"note": "</td><script>document.title='pwned2'</script>"}
    path = tmp_path / "evil.html"
    path.write_text(build_report(doc, title=evil), encoding="utf-8")
    page = open_page(path)
    driver = page.driver
    assert page.console_errors() == []
    # The title is the escaped text itself, so no injected script ran.
    assert driver.title == evil
    scripts = driver.find_elements("tag name", "script")
    assert len(scripts) == 1  # the report's own sorting script
    shape = driver.find_element("css selector", "#patterns tbody td.shape").text
    assert shape == f"client & co>{evil}({evil}>DB<1>)"
    svg_texts = [t.get_attribute("textContent") for t in driver.find_elements("css selector", "svg text")]
    assert evil in svg_texts
    assert "DB<1>" in svg_texts
    assert "</td><script>document.title='pwned2'</script>" in driver.find_element(
        "id", "params"
    ).find_element("xpath", "following-sibling::table").text.replace('"', "")


def test_inline_svg_drops_the_prolog():
    svg = '<?xml version="1.0" standalone="no"?>\n<!DOCTYPE svg PUBLIC "x" "y">\n<!-- c -->\n<svg a="1"/>'
    assert inline_svg(svg) == '<svg a="1"/>'


def _fake_svg(text, fmt):
    assert fmt == "svg"
    return b'<?xml version="1.0"?>\n<svg id="g"><text>drawn</text></svg>\n'


def _conv(delay_s):
    return {
        "format": "wirepath.paths/1",
        "algorithm": "convolution",
        "params": {"quantum_s": 0.002},
        "paths": [{"nodes": ["client", "WS2", "AP1"], "delays_s": [[delay_s]], "counts": [120.0, 100.0]}],
    }


def test_report_of_convolution_paths_lists_and_draws_them():
    doc = _conv(0.201)
    page = build_report(doc, render=_fake_svg)
    assert "<td>client -&gt; WS2 -&gt; AP1</td>" in page
    assert 'data-sort="120.0">120</td>' in page
    assert page.count('<svg id="g">') == 1
    assert "&quot;quantum_s&quot;" not in page  # parameters are listed by name
    assert "<th>quantum_s</th><td>0.002</td>" in page


def test_report_of_no_patterns_still_has_every_section(docs):
    page = build_report(docs.paths_doc(), base=docs.paths_doc(), render=_fake_svg)
    for anchor in ('id="summary"', 'id="top"', 'id="diff"', 'id="params"'):
        assert anchor in page
    assert "no pattern appears in both runs" in page


def test_report_of_convolution_against_a_base_lists_the_delay_changes():
    page = build_report(_conv(0.201), base=_conv(0.001), render=_fake_svg)
    row = re.search(r'<table class="sortable" id="changes">.*?<tbody><tr>(.*?)</tr>', page).group(1)
    assert "+0.20 s" in row
    assert "client -&gt; WS2 -&gt; AP1" in row
    assert ">1 ms<" in row
    assert ">201 ms<" in row


def test_a_busy_run_says_its_confidence_is_rough(runs):
    cfg = synth.load_config(Path(__file__).resolve().parents[2] / "samples" / "synth" / "multitier.toml")
    trace, _ = synth.generate_table(replace(cfg, messages=10_000, parallelism=42.0, seed=7))
    doc = infer.infer_nesting(trace).to_json()
    twin = doc["stats"]["confidence"]["twin_right_rate"]
    assert twin < 0.5
    page = build_report(doc, render=_fake_svg)
    assert f'<p class="note">Note: confidence is rough on a trace this busy: its twin got {twin:.1%}' in page
    calm = runs["slow"]["doc"]
    assert calm["stats"]["confidence"]["twin_right_rate"] >= 0.5
    assert 'class="note"' not in build_report(calm, render=_fake_svg)
