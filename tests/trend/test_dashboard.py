"""The dashboard in a real headless Chromium: tables, links to graphs, plotly traces, offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from wirepath.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "trend"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    store, out = root / "store", root / "site"
    assert main(["trend", "import", str(SAMPLES / "mrr.csv"), "--store", str(store)]) == 0
    assert main(["trend", "import", str(SAMPLES / "latency.json"), "--store", str(store)]) == 0
    assert main(["trend", "dashboard", "--store", str(store), "--out", str(out)]) == 0
    return out


def test_files_are_local_only(site):
    index = (site / "index.html").read_text()
    graphs = sorted((site / "graphs").glob("*.html"))
    assert len(graphs) == 5
    assert (site / "graphs" / "plotly.min.js").stat().st_size > 1_000_000
    for page in [index, *(g.read_text() for g in graphs)]:
        assert "https://cdn" not in page
        assert "http://" not in page.replace("http://www.w3.org", "")


@pytest.mark.browser
def test_dashboard_renders_in_chromium(site, open_page, tmp_path):
    page = open_page(site / "index.html")
    d = page.driver
    headings = [h.text for h in d.find_elements("css selector", "h2")]
    assert headings == ["Testbed 2n-skx", "Testbed 3n-icx", "Testbed staging"]
    # A table per testbed and core count, the count read from the test name.
    sections = d.execute_script(
        "return [...document.querySelectorAll('h2, h3.cores, table.trend')].map(e =>"
        " e.tagName === 'TABLE' ? [...e.querySelectorAll('tbody td a')].map(a => a.textContent).join(',')"
        " : e.textContent);"
    )
    assert sections == [
        "Testbed 2n-skx", "1 core", "ip4base-64b-1c,ip6base-78b-1c",
        "Testbed 3n-icx", "1 core", "ip4-ipsec-1518b-1c", "2 cores", "l2bdbase-64b-2c",
        "Testbed staging", "No core count in the test name", "checkout-p50",
    ]  # fmt: skip
    rows = d.find_elements("css selector", "table.trend tbody tr")
    cells = {
        r.find_element("css selector", "td a").text: [c.text for c in r.find_elements("css selector", "td")]
        for r in rows
    }
    assert set(cells) == {
        "ip4base-64b-1c",
        "ip6base-78b-1c",
        "l2bdbase-64b-2c",
        "ip4-ipsec-1518b-1c",
        "checkout-p50",
    }
    l2 = cells["l2bdbase-64b-2c"]
    assert l2[1].endswith("Mpps")
    assert l2[2].startswith("-")  # short-term change
    assert l2[4:] == ["1", "0", "6"]  # regressions, progressions, runs in last group
    regressed = d.find_elements("css selector", "tr.regressed td a")
    assert {a.text for a in regressed} == {"l2bdbase-64b-2c", "checkout-p50"}
    failed = d.find_elements("css selector", "table.failed tbody tr td")
    assert [c.text for c in failed][:2] == ["ip4base-64b-1c", "1"]
    assert page.console_errors() == []

    # Follow the link to the regressed test's graph.
    link = next(a for a in d.find_elements("css selector", "td a") if a.text == "l2bdbase-64b-2c")
    link.click()
    d.implicitly_wait(5)
    plot = d.find_element("css selector", ".js-plotly-plot")
    assert plot is not None
    traces = d.execute_script(
        "const p = document.querySelector('.js-plotly-plot');"
        "return p.data.map(t => [t.name, t.x.length, (t.marker || {}).color || null]);"
    )
    names = {t[0]: t for t in traces}
    assert names["runs"][1] == 90
    assert names["regressions"][1] == 1
    assert names["regressions"][2] == "red"
    assert "trend" in names
    hover = d.execute_script("return document.querySelector('.js-plotly-plot').data[0].text[0];")
    assert "build: 1000" in hover
    assert "testbed: 3n-icx" in hover
    assert "date: 2026-09-01 02:00 UTC" in hover
    assert page.console_errors() == []
    page.screenshot(tmp_path / "graph.png")


@pytest.mark.parametrize(
    ("test", "cores"),
    [
        ("64b-2t1c-ethip4-ip4base-mrr", 1),
        ("78b-4t2c-ethip6-ip6base-ndrpdr", 2),
        ("l2bdbase-64b-2c", 2),
        ("ip4base-64b-1c", 1),
        ("imix-8t4c-avf-dot1q-l2bdbasemaclrn", 4),
        ("checkout-p50", None),
        ("ip4-10cache-mrr", None),  # "10cache" is not a core count
        ("nginx-wrk-4t-100c-rps", None),  # clients, not cores
        ("memtier-50c-get", None),
        ("http-0c", None),
    ],
)
def test_core_count_from_csit_test_names(test: str, cores: int | None) -> None:
    from trend.dashboard import core_count

    assert core_count(test) == cores


def test_tmm_dashboard_marks_outliers_grey(tmp_path):
    store, out = tmp_path / "store", tmp_path / "site"
    assert main(["trend", "import", str(SAMPLES / "latency.json"), "--store", str(store)]) == 0
    assert (
        main(["trend", "dashboard", "--store", str(store), "--out", str(out), "--method", "tmm", "--json"])
        == 0
    )
    (graph,) = (out / "graphs").glob("*.html")
    text = graph.read_text()
    assert '"name":"outliers"' in text
    assert '"color":"grey"' in text
