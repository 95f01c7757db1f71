"""The report in a real browser: Debian's Chromium, headless, driven by Playwright's Python
package with executable_path=/usr/bin/chromium (Playwright never downloads a browser here).
Playwright rather than raw DevTools or chromedriver: it reports console messages, page errors
and every request as events, and takes the screenshot, in a few lines with no driver process
of its own to match to the browser's version.

A machine without the browser or the package fails these tests with one line naming the fix
(`make install` installs both); they never skip."""
from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import cv2
import numpy as np
import pytest

from carla_wds.view import view

CHROMIUM = os.environ.get("CARLA_WDS_CHROMIUM", "/usr/bin/chromium")
# the flags this closed network needs (no background connections, no GPU, no sandbox as root);
# Playwright adds --headless and a fresh --user-data-dir of its own per launch
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def browser():
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        pytest.fail(f"no Chromium at {CHROMIUM}: run `make install` (it runs apt-get install -y "
                    "chromium) or set CARLA_WDS_CHROMIUM", pytrace=False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: run `make install` (pip install -e "
                    "'.[test]')", pytrace=False)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield b
        b.close()


def open_page(browser, page_file: Path, shot: Path) -> dict:
    """Load the file, screenshot the whole page; what the browser saw."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    seen: dict = {"console": [], "errors": [], "requests": []}
    page.on("console", lambda m: seen["console"].append((m.type, m.text)))
    page.on("pageerror", lambda e: seen["errors"].append(str(e)))
    page.on("request", lambda r: seen["requests"].append(r.url))
    page.goto(page_file.as_uri(), wait_until="load")
    seen["images"] = page.evaluate(
        "[...document.images].filter(i => !i.closest('#zoom')).map(i => ({alt: i.alt,"
        " complete: i.complete, w: i.naturalWidth, h: i.naturalHeight}))")
    seen["charts"] = page.evaluate("document.querySelectorAll('.charts img').length")
    seen["cards"] = page.evaluate("document.querySelectorAll('.card').length")
    page.screenshot(path=str(shot), full_page=True)
    page.close()
    return seen


@pytest.mark.parametrize("layout", ["bench2drive", "garage"])
def test_the_report_opens_in_headless_chromium(browser, packs, tmp_path, layout):
    page_file = view(packs[layout], tmp_path / "report.html", n=6, progress=False)
    seen = open_page(browser, page_file, tmp_path / "shot.png")
    n_cams = 6 if layout == "bench2drive" else 1
    assert seen["cards"] == 6
    # the charts, and per card its cameras and the bird's-eye panel: every one decoded
    assert len(seen["images"]) == seen["charts"] + seen["cards"] * (n_cams + 1)
    assert all(i["complete"] and i["w"] > 0 and i["h"] > 0 for i in seen["images"]), seen["images"]
    assert not seen["errors"], seen["errors"]
    assert not [m for m in seen["console"] if m[0] in ("error", "warning")], seen["console"]
    # nothing fetched but the file itself: no server, no network
    assert [u for u in seen["requests"] if not re.match(r"(file|data):", u)] == []
    shot = cv2.imread(str(tmp_path / "shot.png"))
    assert shot is not None and shot.shape[1] == 1200 and shot.shape[0] > 900
    assert float(shot.std()) > 10.0   # a drawn page, not a blank one


BOXES = "el => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom] }"


def test_cameras_at_their_size_in_rig_order_and_click_to_zoom(browser, packs, tmp_path):
    """Bench2Drive's six cameras: drawn at the size embedded (not shrunk), front-left, front,
    front-right above back-left, back, back-right, the bird's-eye panel to their right; a click
    on a camera shows it large in the overlay, a click on the overlay or Esc closes it."""
    page_file = view(packs["bench2drive"], tmp_path / "report.html", n=2, progress=False)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(page_file.as_uri(), wait_until="load")
    card = page.locator(".card").first
    box = {}
    for name in ("front_left", "front", "front_right", "back_left", "back", "back_right"):
        img = card.locator(f'img[alt="{name}"]')
        size = img.evaluate("i => [i.naturalWidth, i.width, i.naturalHeight, i.height]")
        assert size == [160, 160, 90, 90], (name, size)
        box[name] = img.evaluate(BOXES)
    for row in (("front_left", "front", "front_right"), ("back_left", "back", "back_right")):
        assert box[row[0]][2] <= box[row[1]][0] and box[row[1]][2] <= box[row[2]][0], box
        assert box[row[0]][1] == box[row[1]][1] == box[row[2]][1], box
    assert box["front"][3] <= box["back"][1], box
    bev = card.locator('img[alt="bird\'s-eye"]').evaluate(BOXES)
    assert bev[0] >= box["front_right"][2] and bev[1] < box["back"][3], (bev, box)
    zoom = page.locator("#zoom")
    assert not zoom.is_visible()
    card.locator('img[alt="front"]').click()
    assert zoom.is_visible()
    big = zoom.locator("img").evaluate("i => [i.src, i.width, i.height]")
    assert big[0] == card.locator('img[alt="front"]').get_attribute("src")
    assert big[1] > 4 * 160 or big[2] > 4 * 90, big   # the window's size, not the card's
    assert zoom.inner_text() == "front"
    zoom.click()
    assert not zoom.is_visible()
    card.locator('img[alt="bird\'s-eye"]').click()
    assert zoom.is_visible()
    page.keyboard.press("Escape")
    assert not zoom.is_visible()
    page.close()
