"""A headless browser for tests: Chromium's engine as Qt WebEngine ships it inside a pip wheel
(PyQt6-WebEngine, the dev extra), so a fresh clone's `pip install -e '.[dev]'` brings it and no
browser download (which reaches no CDN here or in CI) is needed.

Contract: `images(url, selector)` opens `url` in a fresh offscreen page, waits until the page
holds at least one element matching `selector` and every one of them has finished loading
(`complete`: loaded or failed), and returns each as {src (its first 60 characters), complete,
naturalWidth, naturalHeight}, with the page's text, how many elements match each selector of
`count` (what markup a page made: `script`, `img[src^="http"]`), and a PNG of the page when
`screenshot` is given. A broken image is complete with naturalWidth 0; the test decides. `missing()` says why
there is no browser (for a skip), or None.

The page runs in a child process (`python -m harness.browser`): Qt wants its application object
on a main thread and lives for the process, which a pytest worker must not inherit.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ENGINE = "PyQt6.QtWebEngineWidgets"
# No display here or in CI; no GPU; Chromium refuses its sandbox as root (CI runs as root), and the
# pages opened are our own, on 127.0.0.1. Nothing leaves the machine: every request but to loopback
# goes to a proxy on a closed loopback port, so no host name is even looked up (Prefect's v2 UI asks
# for its analytics host, amplitude.com, with analytics off), and Chromium's own background traffic
# is off. (Qt WebEngine takes Chromium's flags from this variable, split at spaces.)
FLAGS = ("--disable-gpu --no-first-run --disable-extensions --disable-background-networking --disable-sync "
         "--disable-component-update --disable-quic --proxy-server=http://127.0.0.1:9")
ENV = {"QT_QPA_PLATFORM": "offscreen", "QTWEBENGINE_DISABLE_SANDBOX": "1", "QTWEBENGINE_CHROMIUM_FLAGS": FLAGS}


def missing() -> str | None:
    try:
        found = importlib.util.find_spec(ENGINE) is not None
    except ImportError:  # PyQt6 itself absent
        found = False
    return None if found else f"no headless browser: {ENGINE} is not installed (pip install -e '.[dev]' brings it)"


def images(url: str, selector: str = "img", timeout: float = 40, screenshot: Path | None = None,
           count: tuple[str, ...] = ()) -> dict:
    """{"ready": bool (False: timed out waiting), "images": [...], "text": the page's text,
    "counts": {selector of `count`: how many elements match it}}."""
    cmd = [sys.executable, "-m", "harness.browser", url, selector, str(timeout), str(screenshot or ""),
           json.dumps(list(count))]
    r = subprocess.run(cmd, env={**os.environ, **ENV}, capture_output=True, text=True, timeout=timeout + 30,
                       cwd=Path(__file__).resolve().parents[1])
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"the browser failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(lines[-1])


# the page's side: the matching elements, once all of them are done (null until then)
PROBE = """(() => {
  const els = [...document.querySelectorAll(%s)];
  const info = els.map(i => ({src: (i.getAttribute('src') || '').slice(0, 60), complete: i.complete,
                               naturalWidth: i.naturalWidth, naturalHeight: i.naturalHeight}));
  const done = els.length > 0 && els.every(i => i.complete);
  const counts = Object.fromEntries(%s.map(s => [s, document.querySelectorAll(s).length]));
  return JSON.stringify({ready: done, images: info, text: document.body ? document.body.innerText : '', counts});
})()"""


def _main(url: str, selector: str, timeout: float, screenshot: str, count: str = "[]") -> None:
    from PyQt6.QtCore import QTimer, QUrl
    from PyQt6.QtWebEngineWidgets import QWebEngineView
    from PyQt6.QtWidgets import QApplication

    app = QApplication(sys.argv[:1])
    view = QWebEngineView()
    view.resize(1400, 1000)
    view.show()  # offscreen: laid out and painted like a window, so a screenshot shows what a person sees
    probe, last = PROBE % (json.dumps(selector), count), {"ready": False, "images": [], "text": "", "counts": {}}
    ticks = int(timeout / 0.25)

    def finish(result: dict) -> None:
        if screenshot:
            view.grab().save(screenshot)
        print(json.dumps(result), flush=True)
        app.quit()

    def seen(raw: str | None, left: int) -> None:
        nonlocal last
        last = json.loads(raw) if raw else last
        if last["ready"]:
            QTimer.singleShot(300, lambda: finish(last))  # a moment to paint, for the screenshot
        elif left <= 0:
            finish(last)
        else:
            QTimer.singleShot(250, lambda: view.page().runJavaScript(probe, 0, lambda r: seen(r, left - 1)))

    view.load(QUrl(url))
    QTimer.singleShot(250, lambda: view.page().runJavaScript(probe, 0, lambda r: seen(r, ticks)))
    app.exec()


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4], *sys.argv[5:])
