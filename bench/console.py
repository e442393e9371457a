"""``python -m bench console``: the web console in Debian's headless Chromium against a real daemon.

Usage::

    python -m bench console [--loads 10] [--words 20000] [--json FILE]

* bundle: bytes and gzipped bytes of ``console.js`` as the daemon serves it (budget
  150 KB gzipped);
* first load: ``--loads`` navigations to ``/console/#/chat`` of a signed-in tab with the
  browser cache disabled (every asset fetched again), each timed from navigation start
  to the console's ``palyra:chat-interactive`` User Timing mark (sessions listed, composer
  ready). Target: under 1 s on loopback;
* live run view: a run whose scripted model echoes ``--words`` words, one tape event
  each, opened in the run view as it starts. Reported: the rate the daemon wrote tape
  events while the view followed, how far behind the view was when the run ended
  (ms from the run's last event committed to the view showing it), the most rows the
  page ever held, and the page's JS heap (Chrome's ``performance.memory``) sampled
  through the run. Target: keeps up with 1,000 events/s, rows and heap bounded.

Browser, daemon and this driver share the machine; read the figures with the load.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from palyra.testing.spawn import DaemonProcess, clean_env

DEVICE = "01J00000000000000000000000"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def _driver() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,860", "--enable-precise-memory-info"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def _sign_in(driver: Any, base: str, token: str) -> None:
    driver.get(f"{base}/console/")
    driver.execute_script(
        "sessionStorage.setItem('palyra.console.credentials', JSON.stringify("
        "{token: arguments[0], principal: 'user:bench', device: arguments[1], operator: true}))",
        token, DEVICE)


def _wait(driver: Any, script: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError(script)


def first_loads(driver: Any, base: str, loads: int) -> list[float]:
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    times = []
    for _ in range(loads):
        driver.get("about:blank")
        driver.get(f"{base}/console/#/chat")
        ms = _wait(driver, "const m = performance.getEntriesByName('palyra:chat-interactive');"
                           "return m.length ? m[0].startTime : 0;")
        times.append(float(ms))
    return times


def live_run(driver: Any, base: str, token: str, words: int) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {token}", "x-palyra-principal": "user:bench",
               "x-palyra-device-id": DEVICE}
    text = " ".join(f"w{i}" for i in range(words))
    run = httpx.post(f"{base}/v1/runs", headers=headers, timeout=60,
                     json={"input": {"text": text}, "complete": True}).json()["run"]
    run_id = run["runId"]
    driver.get(f"{base}/console/#/runs/{run_id}")
    rows, heap, samples = 0, 0, []
    started = time.monotonic()
    first_len = None
    while True:
        got = httpx.get(f"{base}/v1/runs/{run_id}", headers=headers).json()["run"]
        now = time.monotonic()
        tape_len = int(got.get("tapeLen", 0))
        if first_len is None and tape_len > 0:
            first_len = (now, tape_len)
        seen = driver.execute_script(
            "const li = document.querySelectorAll('.tape li');"
            "return [li.length, li.length ? Number(li[li.length-1].dataset.seq) : -1,"
            " performance.memory ? performance.memory.usedJSHeapSize : 0];")
        rows, heap = max(rows, seen[0]), max(heap, seen[2])
        samples.append({"t": round(now - started, 3), "tape_len": tape_len, "shown_seq": seen[1],
                        "rows": seen[0], "heap": seen[2]})
        if got["state"] in ("RUN_STATE_DONE", "RUN_STATE_FAILED", "RUN_STATE_CANCELLED"):
            ended, last_seq = now, tape_len - 1
            break
        if now - started > 300:
            raise TimeoutError("the run did not end")
        time.sleep(0.05)
    _wait(driver, f"const li = document.querySelectorAll('.tape li');"
                  f"return li.length && Number(li[li.length-1].dataset.seq) >= {last_seq};", 60)
    lag_ms = (time.monotonic() - ended) * 1000
    t0, n0 = first_len or (started, 0)
    rate = (last_seq + 1 - n0) / max(1e-9, ended - t0)
    return {"run_id": run_id, "events": last_seq + 1, "events_per_s": round(rate),
            "view_lag_after_end_ms": round(lag_ms), "max_rows": rows,
            "max_js_heap_mb": round(heap / 2**20, 1),
            "heap_first_mb": round(next((s["heap"] for s in samples if s["heap"]), 0) / 2**20, 1),
            "samples": samples[:: max(1, len(samples) // 20)]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench console")
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--words", type=int, default=20000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"loadavg": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp, DaemonProcess(Path(tmp) / "data", env=clean_env()) as daemon:
        base = f"http://127.0.0.1:{daemon.http_port}"
        js = httpx.get(f"{base}/console/console.js").content
        result["bundle"] = {"bytes": len(js), "gzip_bytes": len(gzip.compress(js, 9))}
        driver = _driver()
        try:
            _sign_in(driver, base, daemon.token)
            times = first_loads(driver, base, args.loads)
            result["first_load_ms"] = {"median": round(statistics.median(times), 1),
                                       "max": round(max(times), 1), "all": [round(t) for t in times]}
            driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
            result["live_run"] = live_run(driver, base, daemon.token, args.words)
        finally:
            driver.quit()
    result["loadavg_after"] = os.getloadavg()
    summary = {k: v for k, v in result.items() if k != "live_run"}
    summary["live_run"] = {k: v for k, v in result["live_run"].items() if k != "samples"}
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
