"""Loads a page in headless Chromium over the DevTools protocol, waits until the page
says it drew live data (`document.body.dataset.updated`, or the JavaScript expression
READY), then prints its DOM and saves a full-page screenshot.

usage: dashboard_cdp.py CHROMIUM URL SCREENSHOT_PNG [TIMEOUT_S [READY]]
"""
import base64
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websocket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    chromium, url, png = sys.argv[1:4]
    timeout = float(sys.argv[4]) if len(sys.argv) > 4 else 30
    ready = sys.argv[5] if len(sys.argv) > 5 else "document.body.dataset.updated"
    port = free_port()
    profile = tempfile.mkdtemp()
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--hide-scrollbars", "--window-size=1400,1800", f"--user-data-dir={profile}",
         f"--remote-debugging-port={port}", "--remote-allow-origins=*", url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout
        ws_url = None
        while ws_url is None:
            if time.time() > deadline:
                sys.exit("Chromium's DevTools endpoint did not come up")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as r:
                    pages = [t for t in json.load(r) if t.get("type") == "page"]
                ws_url = pages[0]["webSocketDebuggerUrl"] if pages else None
            except OSError:
                pass
            time.sleep(0.2)
        ws = websocket.create_connection(ws_url, timeout=timeout, suppress_origin=True)
        ids = iter(range(1, 1_000_000))

        def call(method, **params):
            i = next(ids)
            ws.send(json.dumps({"id": i, "method": method, "params": params}))
            while True:
                msg = json.loads(ws.recv())
                if msg.get("id") == i:
                    if "error" in msg:
                        sys.exit(f"{method}: {msg['error']}")
                    return msg["result"]

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
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
