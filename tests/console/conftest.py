"""A real daemon and a real headless Chromium (Debian's, through chromium-driver)
for the web console's end-to-end tests.

Every test leaves screenshots in ``build/console-screenshots/``; a failing test
also prints what the page showed (its URL, visible text and browser console).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from palyra.testing.spawn import DaemonProcess, clean_env

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SHOTS = Path(__file__).resolve().parents[2] / "build" / "console-screenshots"
DEVICE = "01J00000000000000000000000"
DESKTOP = (1280, 860)
PHONE = (390, 844)
# Each add call waits for a human: the chat turn and the run view have approvals to decide.
# The watchdog flags an approval pending for a second, so there are incidents to acknowledge.
WEBHOOK_SECRET = "whsec_aW5ib3VuZC1rZXktb2YtdGhlLWNvbnNvbGUtdGVzdA=="
CONFIG = """[policy]
tool_postures = {"add" = "ask_each_time"}

# One tape event per streamed word, so an echo makes a long tape.
[engine]
token_words_per_event = 1

[watchdog]
approval_pending_s = 1.0
scan_every_s = 0.5

# Replies to this endpoint go nowhere (the discard port), so their outbox tasks stay
# queued for a retry: a background task to cancel from the console.
[channels.webhooks.hooks]
secrets = ["WEBHOOK_SECRET"]
reply_url = "http://127.0.0.1:9/nowhere"
reply_secret = "whsec_cmVwbHkta2V5LW9mLXRoZS1jb25zb2xlLXRlc3Q="

[channels.policy."webhook:hooks"]
dm_policy = "allow"

# A RouteMessage channel with its own table: the Channels page lists it.
[channels.policy."slack:T0123"]
dm_policy = "pairing"
""".replace("WEBHOOK_SECRET", WEBHOOK_SECRET)


def admin(token: str, principal: str = "admin:ops", device: str = DEVICE) -> dict[str, str]:
    return {"authorization": f"Bearer {token}", "x-palyra-principal": principal,
            "x-palyra-device-id": device}


class Console:
    """One daemon, one browser, and the helpers the tests share."""

    def __init__(self, daemon: DaemonProcess, driver: WebDriver) -> None:
        self.daemon = daemon
        self.driver = driver
        self.base = f"http://127.0.0.1:{daemon.http_port}"
        self.token = daemon.token

    def api(self, method: str, path: str, principal: str = "admin:ops", device: str = DEVICE,
            **kw: Any) -> Any:
        response = httpx.request(method, self.base + path, headers=admin(self.token, principal, device),
                                 timeout=30, **kw)
        assert response.status_code == 200, f"{method} {path}: {response.status_code} {response.text}"
        return response.json()

    def open(self, fragment: str, base: str = "") -> None:
        self.driver.get(f"{base or self.base}/console/#/{fragment}")

    def wait(self, what: Callable[[WebDriver], Any], timeout: float = 20) -> Any:
        # A re-render may replace an element between finding and reading it: retry.
        return WebDriverWait(self.driver, timeout, poll_frequency=0.05,
                             ignored_exceptions=(StaleElementReferenceException,)).until(what)

    def text(self, css: str = "body") -> str:
        return str(self.driver.find_element(By.CSS_SELECTOR, css).text)

    def wait_text(self, needle: str, css: str = "body", timeout: float = 20) -> None:
        self.wait(lambda d: needle in d.find_element(By.CSS_SELECTOR, css).text, timeout)

    def sign_in(self, principal: str = "user:console", base: str = "") -> None:
        """Sign in through the form (signing out first if the tab acts as someone else)."""
        self.open("chat", base)
        self.wait(lambda d: d.find_elements(By.ID, "token") or d.find_elements(By.CSS_SELECTOR, "nav"))
        if self.driver.find_elements(By.CSS_SELECTOR, "nav"):
            if principal in self.text("nav .who"):
                return
            self.driver.find_element(By.XPATH, "//button[text()='Sign out']").click()
            self.wait(lambda d: d.find_elements(By.ID, "token"))
        self.driver.find_element(By.ID, "token").send_keys(self.token)
        field = self.driver.find_element(By.ID, "principal")
        field.clear()
        field.send_keys(principal)
        self.driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        self.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "nav"))

    def shot(self, name: str, size: tuple[int, int] = DESKTOP) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.driver.set_window_size(*size)
        path = SHOTS / f"{name}.png"
        self.driver.save_screenshot(str(path))
        self.driver.set_window_size(*DESKTOP)
        return path

    def network_requests(self) -> list[dict[str, Any]]:
        """Requests the page sent since the last call (Chrome's performance log)."""
        sent = []
        for entry in self.driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                sent.append(message["params"]["request"])
        return sent


def _driver() -> WebDriver:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are needed "
                    "(tools/system-packages.txt; `nox -s tests` installs them)")
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={DESKTOP[0]},{DESKTOP[1]}", "--force-prefers-reduced-motion"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    root = tmp_path_factory.mktemp("console")
    config = root / "palyra.toml"
    config.write_text(CONFIG)
    daemon = DaemonProcess(root / "data", env=clean_env(), extra_args=("--config", str(config)))
    with daemon:
        driver = _driver()
        try:
            yield Console(daemon, driver)
        finally:
            driver.quit()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    fixture = getattr(item, "funcargs", {}).get("console")
    if report.when != "call" or not report.failed or not isinstance(fixture, Console):
        return
    driver = fixture.driver
    try:
        shot = fixture.shot(f"FAILED-{item.name}")
        body = driver.find_element(By.TAG_NAME, "body").text
        logs = "\n".join(f"{e['level']} {e['message']}" for e in driver.get_log("browser"))
        report.sections.append(("what the page showed", (
            f"url: {driver.current_url}\nscreenshot: {shot}\n--- visible text ---\n{body[:4000]}\n"
            f"--- browser console ---\n{logs[-4000:]}")))
    except Exception as exc:  # the browser itself may be what broke
        report.sections.append(("what the page showed", f"(could not read the page: {exc!r})"))


os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium: no usage statistics


class CuttingProxy:
    """A TCP relay on loopback in front of the daemon whose open connections a test can
    cut, as a flaky network would: the browser's stream breaks mid-run."""

    def __init__(self, target_port: int) -> None:
        self._target = target_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while chunk := source.recv(65536):
                sink.sendall(chunk)
        except OSError:
            pass
        finally:
            # Either side ending ends the pair: close both (a second close is a no-op).
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self._lock:
                self._open = [s for s in self._open if s not in (source, sink)]

    def cut(self) -> int:
        """Reset every connection open now; returns how many sockets were cut."""
        with self._lock:
            cut, self._open = self._open, []
        for s in cut:
            with contextlib.suppress(OSError):
                # RST, not FIN; shutdown() also wakes the pump blocked in recv().
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        return len(cut)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        self.cut()


@pytest.fixture
def proxy(console: Console) -> Iterator[CuttingProxy]:
    relay = CuttingProxy(console.daemon.http_port)
    try:
        yield relay
    finally:
        relay.close()
