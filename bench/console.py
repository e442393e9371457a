"""``python -m bench console``: the web console in Debian's headless Chromium against a real daemon.

Usage::

    python -m bench console [--loads 10] [--words 10000] [--turns 6] [--json FILE]

* bundle: bytes and gzipped bytes of ``console.js`` as the daemon serves it (budget
  150 KB gzipped);
* first load: ``--loads`` navigations to ``/console/#/chat`` of a signed-in tab with the
  browser cache disabled (every asset fetched again), each timed from navigation start
  to the console's ``palyra:chat-interactive`` User Timing mark (sessions listed, composer
  ready). Target: under 1 s on loopback;
* live run view: one run fed ``--turns`` inputs one after another, each echoed back by the
  scripted model as ``--words`` tape events (``[engine] token_words_per_event = 1``; the
  64 KiB reply cap bounds ``--words`` near 10,000), followed in the run view from its
  start. Reported: tape events per second the daemon wrote, how far the page was behind
  (events) at each turn's end, the page's rows and live JS heap (Chrome's
  ``performance.memory`` after a forced GC) at each turn's end, and how long after the last turn the page
  showed the last event. Target: keeps up with 1,000 events/s; rows and heap stay flat.

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


def _sample(driver: Any) -> tuple[int, int, int]:
    """(rows on the page, last tape seq shown, JS heap bytes live after a full GC)."""
    driver.execute_cdp_cmd("HeapProfiler.collectGarbage", {})
    got = driver.execute_script(
        "const li = document.querySelectorAll('.tape li');"
        "return [li.length, li.length ? Number(li[li.length-1].dataset.seq) : -1,"
        " performance.memory ? performance.memory.usedJSHeapSize : 0];")
    return int(got[0]), int(got[1]), int(got[2])


def live_run(driver: Any, base: str, token: str, words: int, turns: int) -> dict[str, Any]:
    """One run fed ``turns`` inputs of ``words`` echoed words, followed in the run view."""
    headers = {"authorization": f"Bearer {token}", "x-palyra-principal": "user:bench",
               "x-palyra-device-id": DEVICE}
    text = " ".join(f"w{i}" for i in range(words))
    client = httpx.Client(base_url=base, headers=headers, timeout=120)
    run_id = client.post("/v1/runs", json={"input": {"text": "start"}}).json()["run"]["runId"]
    driver.get(f"{base}/console/#/runs/{run_id}")
    _wait(driver, "return document.querySelectorAll('.tape li').length > 0")
    samples: list[dict[str, Any]] = []
    started = time.monotonic()
    for turn in range(turns):
        sent = client.post(f"/v1/runs/{run_id}/inputs", json={
            "input": {"text": text}, "wait": True, "complete": turn == turns - 1})
        assert sent.status_code == 200, sent.text
        tape_len = int(sent.json()["run"].get("tapeLen", 0))
        rows, shown, heap = _sample(driver)
        samples.append({"t": round(time.monotonic() - started, 3), "tape_len": tape_len,
                        "behind": tape_len - 1 - shown, "rows": rows, "heap": heap})
    written = time.monotonic()
    last_seq = int(client.get(f"/v1/runs/{run_id}").json()["run"]["tapeLen"]) - 1
    _wait(driver, f"const li = document.querySelectorAll('.tape li');"
                  f"return li.length && Number(li[li.length-1].dataset.seq) >= {last_seq};", 60)
    caught_up_ms = (time.monotonic() - written) * 1000
    rows, _, heap = _sample(driver)
    return {"run_id": run_id, "events": last_seq + 1, "seconds": round(written - started, 2),
            "events_per_s": round((last_seq + 1) / max(1e-9, written - started)),
            "caught_up_after_last_turn_ms": round(caught_up_ms),
            "behind_at_each_turn_end": [s["behind"] for s in samples],
            "rows_at_each_turn_end": [s["rows"] for s in samples],
            "heap_mb_at_each_turn_end": [round(s["heap"] / 2**20, 1) for s in samples],
            "final_rows": rows, "final_heap_mb": round(heap / 2**20, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench console")
    parser.add_argument("--loads", type=int, default=10)
    parser.add_argument("--words", type=int, default=10000)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    result: dict[str, Any] = {"loadavg": os.getloadavg()}
    # One tape event per echoed word (the default groups 16), so the run view gets
    # as many events per second as the daemon can write.
    env = clean_env(PALYRA_ENGINE_TOKEN_WORDS_PER_EVENT="1")
    with tempfile.TemporaryDirectory() as tmp, DaemonProcess(Path(tmp) / "data", env=env) as daemon:
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
            result["live_run"] = live_run(driver, base, daemon.token, args.words, args.turns)
        finally:
            driver.quit()
    result["loadavg_after"] = os.getloadavg()
    summary = {k: v for k, v in result.items() if k != "live_run"}
    summary["live_run"] = result["live_run"]
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
