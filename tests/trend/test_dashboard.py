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
    assert sorted(p.name for p in site.iterdir()) == ["data", "graph.html", "index.html", "plotly.min.js"]
    assert sorted(p.name for p in (site / "data").iterdir()) == ["index.js", "series-0.js"]
    assert (site / "plotly.min.js").stat().st_size > 1_000_000
    pages = [site / "index.html", site / "graph.html", *(site / "data").iterdir()]
    for page in (p.read_text() for p in pages):
        assert "https://" not in page
        assert "http://" not in page.replace("http://www.w3.org", "")


def _cells(d):
    return {
        r.find_element("css selector", "td a").text: [c.text for c in r.find_elements("css selector", "td")]
        for r in d.find_elements("css selector", "#series tbody tr")
    }


@pytest.mark.browser
def test_dashboard_renders_in_chromium(site, open_page, tmp_path):
    page = open_page(site / "index.html")
    d = page.driver
    _wait_ready(d)
    # Every series in one table, those in a regression now first (then by name).
    order = [a.text for a in d.find_elements("css selector", "#series tbody td:first-child a")]
    assert order == [
        "checkout-p50",
        "l2bdbase-64b-2c",
        "ip4-ipsec-1518b-1c",
        "ip4base-64b-1c",
        "ip6base-78b-1c",
    ]
    assert d.find_element("id", "shown").text == "5 of 5 series"
    cells = _cells(d)
    # test, testbed, cores (read from the name), trend, short, long, regressions, progressions,
    # runs in last group, last change.
    assert [c[1:3] for c in cells.values()] == [
        ["staging", ""], ["3n-icx", "2"], ["3n-icx", "1"], ["2n-skx", "1"], ["2n-skx", "1"],
    ]  # fmt: skip
    l2 = cells["l2bdbase-64b-2c"]
    assert l2[3].endswith("Mpps")
    assert l2[4].startswith("-")  # short-term change
    assert l2[6:9] == ["1", "0", "6"]  # regressions, progressions, runs in last group
    assert l2[9].startswith("2026-")  # the date of the last change
    regressed = d.find_elements("css selector", "tr.regressed td a")
    assert {a.text for a in regressed} == {"l2bdbase-64b-2c", "checkout-p50"}
    assert len(d.find_elements("css selector", "svg.spark polyline")) == 5
    failed = d.find_elements("css selector", "table.failed tbody tr td")
    assert [c.text for c in failed][:2] == ["ip4base-64b-1c", "1"]

    # Filters: a testbed, a core count, regressions now, a name.
    from selenium.webdriver.support.ui import Select

    Select(d.find_element("id", "testbed")).select_by_value("3n-icx")
    assert sorted(_cells(d)) == ["ip4-ipsec-1518b-1c", "l2bdbase-64b-2c"]
    Select(d.find_element("id", "cores")).select_by_value("2")
    assert sorted(_cells(d)) == ["l2bdbase-64b-2c"]
    Select(d.find_element("id", "testbed")).select_by_value("")
    Select(d.find_element("id", "cores")).select_by_value("")
    d.find_element("id", "regressed").click()
    assert sorted(_cells(d)) == ["checkout-p50", "l2bdbase-64b-2c"]
    d.find_element("id", "regressed").click()
    d.find_element("id", "filter").send_keys("ip6")
    assert sorted(_cells(d)) == ["ip6base-78b-1c"]
    d.find_element("id", "filter").clear()
    d.find_element("id", "filter").send_keys(" ")  # an input event with the box back to blank
    d.find_element("id", "filter").clear()
    # Sorting by a column, both ways.
    header = d.find_element("css selector", 'th[data-key="last_group"]')
    header.click()
    runs = [int(c[8]) for c in _cells(d).values()]
    assert runs == sorted(runs)
    header.click()
    runs = [int(c[8]) for c in _cells(d).values()]
    assert runs == sorted(runs, reverse=True)
    assert page.console_errors() == []
    page.screenshot(tmp_path / "index.png")

    # Follow the link to the regressed test's graph: drawn on demand from its data file.
    link = next(a for a in d.find_elements("css selector", "td a") if a.text == "l2bdbase-64b-2c")
    link.click()
    d.implicitly_wait(5)
    d.find_element("css selector", ".js-plotly-plot")
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
    assert d.title == "l2bdbase-64b-2c (3n-icx), mdl"
    assert page.console_errors() == []
    page.screenshot(tmp_path / "graph.png")


@pytest.mark.browser
def test_a_graph_link_to_no_series_says_so(site, open_page):
    page = open_page(site / "graph.html")
    d = page.driver
    d.get((site / "graph.html").as_uri() + "#0/no-such-series")
    assert d.find_element("id", "missing").is_displayed()
    d.get((site / "graph.html").as_uri() + "#../../etc/x")
    assert d.find_element("id", "missing").is_displayed()


def test_names_with_markup_are_text_in_the_data(tmp_path):
    import numpy as np

    from trend.analysis import analyze_series
    from trend.dashboard import write_dashboard
    from trend.series import Series

    s = Series(
        "<script>x</script>",
        "tb</script>",
        "pps",
        "bigger-is-better",
        ("b<1>",),
        np.array([0]),
        (np.array([1e6]),),
    )
    report = write_dashboard([analyze_series(s)], tmp_path)
    for path in report.data:
        assert "</script>" not in path.read_text()


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
    text = (out / "data" / "series-0.js").read_text()
    assert '"name":"outliers"' in text
    assert '"color":"grey"' in text


@pytest.mark.browser
def test_an_index_of_ten_thousand_series_opens_and_filters(tmp_path, open_page):
    import numpy as np

    from trend.analysis import analyze_all
    from trend.dashboard import write_dashboard
    from trend.series import Series

    rng = np.random.default_rng(1)
    day = 86_400 * 10**9
    series = []
    for k in range(10_000):
        level = 1e7 * (1 + rng.random())
        values = level * (1 + rng.normal(0, 0.002, 8))
        if k % 97 == 0:
            values[5:] *= 0.9  # a regression at the newest runs of every 97th series
        trials = tuple(np.array([v]) for v in values)
        builds = tuple(f"b{i}" for i in range(8))
        series.append(Series(f"t{k:05d}-64b-2t1c-mrr", f"tb{k % 3}", "pps", "bigger-is-better", builds,
                             np.arange(8) * day, trials))  # fmt: skip
    report = write_dashboard(analyze_all(series), tmp_path / "site")
    assert len(report.data) == 101  # the index and 100 files of 100 series
    page = open_page(report.index)
    d = page.driver
    _wait_ready(d)
    assert d.find_element("id", "shown").text == "100 of 10,000 series"
    first = [a.text for a in d.find_elements("css selector", "#series tbody td:first-child a")][:3]
    assert first == ["t00000-64b-2t1c-mrr", "t00097-64b-2t1c-mrr", "t00194-64b-2t1c-mrr"]
    d.find_element("id", "regressed").click()
    assert d.find_element("id", "shown").text == "100 of 104 series"
    d.find_element("id", "more").click()
    assert len(d.find_elements("css selector", "#series tbody tr")) == 104
    assert not d.find_element("id", "more").is_displayed()
    assert page.console_errors() == []


def test_a_unit_is_text_in_the_graph_too():
    import numpy as np

    from trend.analysis import analyze_series
    from trend.dashboard import figure_data
    from trend.series import Series

    link = '<a href="https://example.invalid/">x</a>'
    s = Series("t", "tb", link, "bigger-is-better", ("b1",), np.array([0]), (np.array([5.0]),))
    fig = figure_data(analyze_series(s))
    assert "<a " not in fig["data"][0]["text"][0]
    assert "<a " not in fig["layout"]["yaxis"]["title"]["text"]


def _wait_ready(driver) -> None:
    """Wait until the page says it has drawn (``body[data-ready=1]``): a busy machine may
    take seconds over an index of ten thousand series."""
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(driver, 60).until(lambda d: d.execute_script("return document.body.dataset.ready") == "1")
