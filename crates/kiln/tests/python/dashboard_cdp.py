"""Loads a page in headless Chromium over the DevTools protocol, waits until the page
says it drew live data (`document.body.dataset.updated`, or the JavaScript expression
READY), then prints its DOM and saves a full-page screenshot.

usage: dashboard_cdp.py CHROMIUM URL SCREENSHOT_PNG [TIMEOUT_S [READY]]
"""
import base64
import sys
import time

import cdp


def main():
    chromium, url, png = sys.argv[1:4]
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 30
    ready = sys.argv[5] if len(sys.argv) > 5 else "document.body.dataset.updated"
    deadline = time.time() + timeout
    with cdp.page(chromium, url, timeout) as call:
        html = ""
        while not html:
            if time.time() > deadline:
                sys.exit("the page never drew a snapshot")
            r = call("Runtime.evaluate", expression=(
                f"document.body && ({ready})"
                " ? document.documentElement.outerHTML : ''"), returnByValue=True)
            html = r["result"].get("value") or ""
            time.sleep(0.3)
        shot = call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(png, "wb") as f:
            f.write(base64.b64decode(shot["data"]))
        print(html)


if __name__ == "__main__":
    main()
