"""How soon the router's dashboard shows something, and its data, in headless Chromium
(issue 34's target: first paint under 1 s with 24 h of rollups for 50 colos).

Usage: python dashboard_paint.py DASHBOARD_URL [RUNS] [CHROMIUM]

e.g., with a data dir seeded with a day of per-minute rollups and a router over it:

    cargo run --release -p kiln-observe --example seed_rollups /tmp/dash 50 3 24
    kiln route --data-dir /tmp/dash --node http://127.0.0.1:9@colo=c00 --port 8090 &
    target/tmp/python-venv/bin/python scripts/bench/dashboard_paint.py \\
        http://127.0.0.1:8090/dashboard 5

Each run starts a fresh Chromium (new profile, empty cache) on about:blank, navigates
to the page over the DevTools protocol (websocket-client, as the browser test does) and
reports, in ms from navigation start:

- first paint and first contentful paint (the Paint Timing API);
- the first snapshot in the DOM: when app.js set `body[data-updated]` after drawing the
  first SSE snapshot into every panel (a MutationObserver installed before the page's
  own scripts), and the frame after it (`requestAnimationFrame`, then a task);
- the colo tiles drawn then, and the page's DOMContentLoaded and load.

Runs are spaced by more than the router's snapshot cache (1 s), so each builds its
own. Last, the SSE stream's first snapshot alone is timed over plain HTTP, with its size.
Needs the venv's `websocket-client` (target/tmp/python-venv, made by the e2e tests).
"""

import json
import pathlib
import shutil
import statistics
import sys
import time
import urllib.request

# The browser test's DevTools driver.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "crates/kiln/tests/python"))
import cdp  # noqa: E402

WATCH = """
window.__bench = {};
new MutationObserver((_, obs) => {
  if (!window.__bench.snapshot && document.body && document.body.dataset.updated) {
    window.__bench.snapshot = performance.now();
    window.__bench.tiles = document.querySelectorAll('#colos .tile').length;
    requestAnimationFrame(() => setTimeout(() => { window.__bench.frame = performance.now(); }, 0));
    obs.disconnect();
  }
}).observe(document, {subtree: true, attributes: true, attributeFilter: ['data-updated']});
"""

COLLECT = """JSON.stringify({
  paint: Object.fromEntries(performance.getEntriesByType('paint').map(e => [e.name, e.startTime])),
  nav: performance.getEntriesByType('navigation')[0]?.toJSON(),
  bench: window.__bench,
})"""


def one_run(chromium, url, timeout=30):
    with cdp.page(chromium, "about:blank", timeout) as call:
        deadline = time.time() + timeout

        def evaluate(expr):
            return call("Runtime.evaluate", expression=expr, returnByValue=True)["result"].get("value")

        call("Page.enable")
        call("Page.addScriptToEvaluateOnNewDocument", source=WATCH)
        time.sleep(1.0)  # let the browser's own start-up work settle
        call("Page.navigate", url=url)
        while not evaluate("window.__bench && window.__bench.frame"):
            if time.time() > deadline:
                sys.exit("the page never drew a snapshot")
            time.sleep(0.05)
        return json.loads(evaluate(COLLECT))


def first_snapshot(url):
    """Seconds to the stream's first snapshot over plain HTTP, and its size in bytes."""
    events = url.rstrip("/") + "/events"
    t = time.perf_counter()
    with urllib.request.urlopen(events) as r:
        buf = b""
        while b"\n\n" not in buf:
            buf += r.read1(65536)
    return time.perf_counter() - t, len(buf.split(b"\n\n")[0])


def main():
    url = sys.argv[1]
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    chromium = sys.argv[3] if len(sys.argv) > 3 else shutil.which("chromium") or "chromium"
    cols = ["FP", "FCP", "DCL", "load", "snapshot", "next frame"]
    print(f"{'run':>4} " + " ".join(f"{c:>10}" for c in cols) + "   tiles  (ms from navigation start)")
    rows = []
    for i in range(1, runs + 1):
        r = one_run(chromium, url)
        nav, paint, bench = r["nav"] or {}, r["paint"], r["bench"]
        row = [paint.get("first-paint"), paint.get("first-contentful-paint"),
               nav.get("domContentLoadedEventEnd"), nav.get("loadEventEnd"),
               bench["snapshot"], bench["frame"]]
        rows.append(row)
        print(f"{i:>4} " + " ".join(f"{v:>10.1f}" if v is not None else f"{'-':>10}" for v in row)
              + f"   {bench['tiles']:>5}")
        time.sleep(1.5)
    print("  md " + " ".join(f"{statistics.median(v for v in col if v is not None):>10.1f}"
                              for col in zip(*rows)))
    print(" max " + " ".join(f"{max(v for v in col if v is not None):>10.1f}" for col in zip(*rows)))
    secs, size = first_snapshot(url)
    print(f"SSE first snapshot over HTTP: {1000 * secs:.1f} ms, {size} bytes")


if __name__ == "__main__":
    main()
