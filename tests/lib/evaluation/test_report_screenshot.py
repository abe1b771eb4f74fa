"""The evaluation report as a reviewer sees it: rendered by headless Chromium, the run's header, the loss curves,
the slice table and the feature-importance chart laid out, visible and drawn (checked on the page's layout and on
a full-page screenshot, not on the HTML text).

Chromium is driven over its DevTools protocol on a pipe (`--remote-debugging-pipe`: JSON messages ending in a NUL
byte, read on fd 4 and written on fd 3 by the browser), so nothing but Debian's `chromium` package is needed and
no port is opened. Skipped where chromium is missing, except under CI (CI=true), which installs it
(`scripts/install-browser.sh`) and fails without it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from typing import Any, Dict, Optional

import numpy as np
import pytest
from matplotlib.image import imread
from report_checks import penguin_findings

from estimator_lib.evaluation import report as report_lib

# Headless, offline, no background connections (the network may be closed; a report fetches nothing), and shared
# memory in /tmp (a container's /dev/shm is often too small).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)
TIMEOUT = 60.0
WIDTH, HEIGHT = 1280, 900
BAR_BLUE = np.array([0x4C, 0x72, 0xB0]) / 255.0  # the importance bars' colour (report._bar_plot)
FAILED_ROW = np.array([0xFC, 0xE8, 0xE6]) / 255.0  # a failed slice's row background (report._STYLE)
VALIDATION_ORANGE = np.array([0xDD, 0x84, 0x52]) / 255.0  # the validation curve's colour (report.curves_plot)
SELECTED_GREEN = np.array([0x13, 0x73, 0x33]) / 255.0  # the selected step's line (report.curves_plot)


def _above_nine(fd: int) -> int:
    """The same pipe end as a descriptor above 9 (the original closed)."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


class DevTools:
    """A headless Chromium and its DevTools protocol session over a pipe."""

    def __init__(self, browser: str, profile: str, log: str) -> None:
        to_browser, self._writer = os.pipe()
        self._reader, from_browser = os.pipe()
        # The browser reads fd 3 and writes fd 4: bash moves the pipe's ends there and becomes the browser. The
        # ends are first put above 9 (bash takes two-digit descriptors, sh does not), so no move overwrites another.
        to_browser, from_browser = (_above_nine(fd) for fd in (to_browser, from_browser))
        moved = f'exec "$@" 3<&{to_browser} 4>&{from_browser} {to_browser}<&- {from_browser}>&-'
        with open(log, "wb") as stderr:
            self.process = subprocess.Popen(
                ["bash", "-c", moved, "bash", browser, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                pass_fds=(to_browser, from_browser),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
        os.close(to_browser)
        os.close(from_browser)
        self._buffer, self._id, self.log = b"", 0, log

    def call(self, method: str, session: Optional[str] = None, **params: Any) -> Dict[str, Any]:
        """Sends one command and returns its result (events in between are dropped)."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._writer, json.dumps(message).encode("utf-8") + b"\0")
        deadline = time.monotonic() + TIMEOUT
        while True:
            reply = json.loads(self._next_message(deadline))
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"chromium refused {method}: {reply['error']} (log: {self.log})")
                return reply["result"]

    def _next_message(self, deadline: float) -> bytes:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._reader], [], [], max(0.0, deadline - time.monotonic()))
            chunk = os.read(self._reader, 1 << 20) if ready else b""
            if not chunk:
                raise RuntimeError(f"chromium did not answer within {TIMEOUT}s or exited (log: {self.log})")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return message

    def open_page(self, url: str) -> str:
        """A new tab at `url`, WIDTH x HEIGHT at one device pixel per CSS pixel; returns its session, loaded with
        every image decoded."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call(
            "Emulation.setDeviceMetricsOverride", session, width=WIDTH, height=HEIGHT, deviceScaleFactor=1, mobile=False
        )
        self.call("Page.navigate", session, url=url)
        loaded = (
            "new Promise(done => document.readyState === 'complete' ? done() : addEventListener('load', done))"
            ".then(() => Promise.all([...document.images].map(image => image.decode().catch(() => null))))"
            ".then(() => true)"
        )
        self.evaluate(session, loaded)
        return session

    def evaluate(self, session: str, expression: str) -> Any:
        result = self.call("Runtime.evaluate", session, expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page's script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.call("Browser.close")
        finally:
            try:
                self.process.wait(timeout=TIMEOUT)
            finally:
                if self.process.poll() is None:
                    self.process.kill()
                os.close(self._writer)
                os.close(self._reader)


@pytest.fixture
def chromium(tmp_path):
    browser = shutil.which("chromium")
    if browser is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed: CI installs it with scripts/install-browser.sh (as root)")
        pytest.skip("chromium is not installed (bash scripts/install-browser.sh, as root)")
    devtools = DevTools(browser, str(tmp_path / "profile"), str(tmp_path / "chromium.log"))
    yield devtools
    devtools.close()


# Page coordinates (CSS pixels from the document's top left) of an element, and what is drawn at its centre.
LAYOUT = """(() => {
  const box = element => {
    element.scrollIntoView({block: 'center'});
    const r = element.getBoundingClientRect(), style = getComputedStyle(element);
    const top = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height,
            shown: style.display !== 'none' && style.visibility === 'visible' && style.opacity === '1',
            on_top: element === top || element.contains(top)};
  };
  const table = document.getElementById('slice-table');
  const chart = document.querySelector('#importance img[alt="Permutation importance"]');
  const header = document.querySelector('#header table');
  const curves = document.querySelector('#curves img[alt="Loss during training"]');
  const result = {table: box(table), chart: box(chart), natural_width: chart.naturalWidth,
                  rows: [...table.rows].map(row => [...row.cells].map(cell => cell.innerText)),
                  header: box(header), facts: [...header.rows].map(row => [...row.cells].map(c => c.innerText)),
                  curves: box(curves), curves_width: curves.naturalWidth,
                  order: ['header', 'slices', 'importance', 'curves', 'worst-rows'].map(
                    id => document.getElementById(id).getBoundingClientRect().top + scrollY)};
  scrollTo(0, 0);
  result.page = {width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight};
  return result;
})()"""


def _region(pixels: np.ndarray, box: Dict[str, float]) -> np.ndarray:
    top, left = int(round(box["y"])), int(round(box["x"]))
    return pixels[top : top + int(box["height"]), left : left + int(box["width"]), :3]


def _full_page_screenshot(chromium: DevTools, session: str, size: Dict[str, int], path: Any) -> np.ndarray:
    """Writes a PNG of the whole page (one pixel per CSS pixel) to `path`; returns its pixels [H, W, channels]."""
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = chromium.call("Page.captureScreenshot", session, format="png", captureBeyondViewport=True, clip=clip)
    path.write_bytes(base64.b64decode(shot["data"]))
    print(f"report screenshot: {path}")
    return imread(str(path))


def _assert_laid_out(layout: Dict[str, Any]) -> None:
    """The slice table and the chart are displayed, on top at their centre, inside the page, at their size."""
    table, chart, size = layout["table"], layout["chart"], layout["page"]
    assert table["shown"] and table["on_top"] and table["width"] > 300 and table["height"] > 100, table
    slices = [row[0] for row in layout["rows"]]
    assert slices == ["slice", "all eval rows", "island=Torgersen", "island=Dream", "island=Biscoe"]
    assert layout["rows"][2][-1] == "too few rows to judge either way" and layout["rows"][3][-1] == "FAILED"
    assert chart["shown"] and chart["on_top"] and layout["natural_width"] == 450, (chart, layout["natural_width"])
    assert chart["width"] == 450 and chart["height"] >= 200
    for box in (table, chart):
        assert 0 < box["x"] and box["x"] + box["width"] <= size["width"] and box["y"] + box["height"] <= size["height"]


def _assert_story_laid_out(layout: Dict[str, Any]) -> None:
    """The header and the curves are displayed, on top, inside the page, and the sections in reading order."""
    header, curves, size = layout["header"], layout["curves"], layout["page"]
    assert header["shown"] and header["on_top"] and header["width"] > 300 and header["height"] > 100, header
    assert [row[0] for row in layout["facts"]] == [
        "what",
        "run",
        "started",
        "duration so far",
        "data",
        "data fingerprint",
        "code",
        "model",
    ]
    assert layout["facts"][2][1] == "2026-11-25 21:19:12 UTC"
    assert curves["shown"] and curves["on_top"] and layout["curves_width"] == curves["width"] == 630, curves
    for box in (header, curves):
        assert 0 < box["x"] and box["x"] + box["width"] <= size["width"] and box["y"] + box["height"] <= size["height"]
    assert layout["order"] == sorted(layout["order"])


def _assert_curves_drawn(pixels: np.ndarray, layout: Dict[str, Any], screenshot: Any) -> None:
    drawn = _region(pixels, layout["curves"])
    for colour, name in (
        (VALIDATION_ORANGE, "validation curve"),
        (SELECTED_GREEN, "selected step"),
        (BAR_BLUE, "training curve"),
    ):
        found = np.all(np.abs(drawn - colour) < 0.05, axis=-1).sum()
        assert found > 50, f"{found} pixels of the {name}'s colour in the curves' region of {screenshot}"
    facts = _region(pixels, layout["header"])
    assert (facts.max(axis=-1) < 0.3).sum() > 200, f"no dark text in the header's region of {screenshot}"


def test_chromium_shows_the_header_curves_slice_table_and_importance_chart(chromium, tmp_path):
    page, screenshot = tmp_path / "report.html", tmp_path / "report.png"
    page.write_text(report_lib.render_html(penguin_findings()), encoding="utf-8")
    session = chromium.open_page(page.as_uri())
    layout = chromium.evaluate(session, LAYOUT)
    _assert_laid_out(layout)
    _assert_story_laid_out(layout)
    pixels = _full_page_screenshot(chromium, session, layout["page"], screenshot)
    _assert_curves_drawn(pixels, layout, screenshot)
    assert pixels.shape[:2] == (layout["page"]["height"], layout["page"]["width"])

    drawn = _region(pixels, layout["chart"])
    assert drawn.std() > 0.1, f"the chart's region of {screenshot} is blank"
    bars = np.all(np.abs(drawn - BAR_BLUE) < 0.02, axis=-1).sum()
    assert bars > 1000, f"{bars} pixels of the bars' blue in the chart's region of {screenshot}"
    text = _region(pixels, layout["table"])
    assert (text.max(axis=-1) < 0.3).sum() > 200, f"no dark text in the slice table's region of {screenshot}"
    failed_row = np.all(np.abs(text - FAILED_ROW) < 0.01, axis=-1).sum()
    assert failed_row > 1000, f"the failed slice's row is not marked in {screenshot}"
