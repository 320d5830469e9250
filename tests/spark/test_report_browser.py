"""The advisor's HTML report as a person sees it: opened in a real headless Chromium (Debian's package).

`kquota advise` runs on the planted usage of test_cli with `--current`, so every section is there;
the page is then loaded through Playwright (the browser is the system's, nothing is downloaded) and
checked the way a reader would judge it: the decision and the changes against what is applied now
above the fold, every plot decoded, no table wider than the window, every rate with a unit, and a
screenshot that is not blank.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib import image as mpimg

from tests.spark.test_cli import applied_now, run, write_input

pytestmark = [pytest.mark.spark, pytest.mark.slow]

VIEWPORT = {"width": 1280, "height": 900}


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "Debian's chromium is not installed: `make system-packages` installs it"
    return path


@pytest.fixture(scope="module")
def report_page(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    from playwright.sync_api import sync_playwright

    tmp = tmp_path_factory.mktemp("report")
    source = write_input(tmp, "csv", spark)
    out = tmp / "advice"
    argv = ["advise", "--input", str(source), "--out", str(out), "--broker-capacity", "20Mi"]
    assert run([*argv, "--current", str(applied_now(tmp / "applied")), "--quiet"]) == 0
    errors: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=VIEWPORT)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto((out / "report.html").as_uri(), wait_until="load")
            page.screenshot(path=str(tmp / "top.png"))
            yield page, errors, tmp / "top.png"
        finally:
            browser.close()


def test_the_decision_and_the_changes_are_above_the_fold(report_page: Any) -> None:
    page, errors, _ = report_page
    assert errors == []
    for heading in ("Recommendation", "Against what is applied now"):
        box = page.get_by_role("heading", name=heading).bounding_box()
        assert box is not None, f"no {heading!r} heading"
        assert box["y"] + box["height"] <= VIEWPORT["height"], f"{heading!r} is below the first screen: {box}"
    top = page.evaluate(
        "() => [...document.querySelectorAll('h2')].filter(h => h.getBoundingClientRect().top < innerHeight)"
        ".map(h => h.textContent)"
    )
    assert top[:2] == ["Recommendation", "Against what is applied now"]


def test_every_plot_is_a_decoded_image(report_page: Any) -> None:
    page, _, _ = report_page
    sizes = page.evaluate("() => [...document.images].map(i => [i.alt, i.complete, i.naturalWidth])")
    assert len(sizes) >= 5
    assert [alt for alt, complete, width in sizes if not complete or width == 0] == []


def test_no_table_is_wider_than_the_window(report_page: Any) -> None:
    page, _, _ = report_page
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= VIEWPORT["width"], f"the page scrolls sideways: {width}px"


def test_what_the_reader_sees_has_units_and_names_every_change(report_page: Any) -> None:
    page, _, _ = report_page
    text = page.inner_text("body")
    assert not re.search(r"\d\.\d+e[+-]?\d+", text), "a number in exponent form"
    assert "users/CN=etl,OU=data" in text
    changes = page.locator("h2:has-text('Against what is applied now') + p + table").inner_text()
    for row in (
        "raise\tusers/CN=etl,OU=data\tproduce\t10 MiB/s\t15 MiB/s\t+50%",
        "drop\tusers/alice\tproduce\t1 MiB/s",
    ):
        assert row in changes


def test_the_screenshot_is_not_blank(report_page: Any) -> None:
    _, _, shot = report_page
    pixels = np.asarray(mpimg.imread(str(shot)))
    assert pixels.shape[:2] == (VIEWPORT["height"], VIEWPORT["width"])
    # Text and table rules on a white page: many distinct shades, not one colour.
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 20
    assert Path(shot).stat().st_size > 10_000
