"""Headless Chromium driven over the DevTools protocol (websocket-client): start it on a
URL with a fresh profile, and send it commands. Shared by the dashboards' browser test
(`dashboard_cdp.py`) and `scripts/bench/dashboard_paint.py`."""
import contextlib
import json
import shutil
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


@contextlib.contextmanager
def page(chromium, url, timeout):
    """Chromium headless on `url` (fresh profile); yields `call(method, **params)`,
    which returns a DevTools command's result (exiting on an error). Killed on exit."""
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
            time.sleep(0.1)
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

        yield call
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
