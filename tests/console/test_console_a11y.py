"""Accessibility basics of the console in Chromium: every page operable from the
keyboard, every control named, text contrast at least WCAG AA (4.5:1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from .conftest import Console
from .test_console_e2e import ADD_TWICE

pytestmark = pytest.mark.slow
AUDIT = (Path(__file__).with_name("a11y.js")).read_text()
PAGES = ["chat", "runs", "approvals", "sessions", "journal", "channels", "learning", "agents",
         "memory", "ops"]


def _tab_to(console: Console, predicate: str, limit: int = 120) -> None:
    """Press Tab until ``predicate`` (JS over ``document.activeElement``) holds."""
    for _ in range(limit):
        if console.driver.execute_script(f"const el = document.activeElement; return {predicate};"):
            return
        console.driver.switch_to.active_element.send_keys(Keys.TAB)
    raise AssertionError(f"Tab never reached {predicate}")


def test_sign_in_chat_and_approve_from_the_keyboard(console: Console) -> None:
    console.open("chat")
    if console.driver.find_elements(By.CSS_SELECTOR, "nav"):
        console.driver.find_element(By.XPATH, "//button[text()='Sign out']").click()
    console.wait(lambda d: d.find_elements(By.ID, "token"))
    _tab_to(console, "el.id === 'token'")
    console.driver.switch_to.active_element.send_keys(console.token)
    _tab_to(console, "el.id === 'principal'")
    field = console.driver.switch_to.active_element
    field.send_keys(Keys.CONTROL, "a")
    field.send_keys("user:keyboard", Keys.ENTER)
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "nav"))

    # The composer has the focus on arrival; Enter sends.
    console.wait(lambda d: d.execute_script("return document.activeElement.id") == "message")
    console.driver.switch_to.active_element.send_keys(ADD_TWICE, Keys.ENTER)
    for decided in (1, 2):
        console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".approval-card button.approve"))
        _tab_to(console, "el.classList.contains('approve')")
        console.driver.switch_to.active_element.send_keys(Keys.ENTER)
        console.wait(lambda d, n=decided: len(d.find_elements(By.CSS_SELECTOR, ".decided.ok")) == n)
    console.wait_text("run done", css=".transcript", timeout=40)


@pytest.mark.parametrize(("width", "scheme"), [(1280, "light"), (390, "light"), (1280, "dark")])
def test_every_page_names_its_controls_and_has_contrast(console: Console, width: int,
                                                         scheme: str) -> None:
    console.sign_in("admin:ops")
    console.driver.set_window_size(width, 860)
    console.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": scheme}]})
    try:
        problems = []
        for page in PAGES:
            console.open(page)
            console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "main h1, main h2"))
            found = console.driver.execute_script(AUDIT)
            problems += [f"{page}: unnamed {html}" for html in found["unnamed"]]
            problems += [f"{page}: contrast {ratio} for {what}"
                         for what, ratio in found["texts"] if ratio < 4.5]
            assert found["texts"], page
        assert not problems, "\n".join(problems)
    finally:
        console.driver.set_window_size(1280, 860)
        console.driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
