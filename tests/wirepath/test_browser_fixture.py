"""The headless-browser fixture works: a page loads, console errors are caught, screenshots are taken."""

import pytest


@pytest.mark.browser
def test_page(open_page, tmp_path):
    f = tmp_path / "a.html"
    f.write_text("<html><body><p id=x>hi</p><script>console.error('boom')</script></body></html>")
    page = open_page(f)
    assert page.driver.find_element("id", "x").text == "hi"
    assert any("boom" in m for m in page.console_errors())
    page.screenshot(tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 1000
