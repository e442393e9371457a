"""The console's other pages, driven in Chromium against a real daemon: sessions
(resolve, posture, branch, clean up), agents (create, edit, bind), memory (search,
provenance, delete), tokens (issue, revoke). Each change is checked through the API."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select

from palyra.testing.platforms import webhook_headers

from .conftest import WEBHOOK_SECRET, Console

pytestmark = pytest.mark.slow


def _card(console: Console, xpath_text: str) -> WebElement:
    found: WebElement = console.wait(lambda d: d.find_element(
        By.XPATH, f"//article[.//strong[text()='{xpath_text}']]"))
    return found


def _fill(element: WebElement, text: str) -> None:
    element.clear()
    element.send_keys(text)


def test_sessions_resolve_posture_branch_cleanup(console: Console) -> None:
    console.sign_in("admin:ops")
    console.open("sessions")
    _fill(console.wait(lambda d: d.find_element(By.ID, "session-key")), "from-the-console")
    console.driver.find_element(By.XPATH, "//button[text()='Resolve']").click()
    card = _card(console, "from-the-console")
    _fill(card.find_element(By.CSS_SELECTOR, "input[id^=tool-]"), "add")
    Select(card.find_element(By.CSS_SELECTOR, "select[id^=posture-]")).select_by_visible_text("disabled")
    card.find_element(By.XPATH, ".//button[text()='Set posture']").click()
    console.wait(lambda d: "add: disabled" in _card(console, "from-the-console").text)
    # Sessions belong to the identity that made them, the tab's device included.
    device = console.driver.execute_script(
        "return JSON.parse(sessionStorage.getItem('palyra.console.credentials')).device")
    sessions = console.api("GET", "/v1/sessions", device=device, params={"limit": 200})["sessions"]
    [session] = [s for s in sessions if s["sessionKey"] == "from-the-console"]
    assert session["toolPostures"] == {"add": "TOOL_POSTURE_DISABLED"}

    # Reset keeps the session but forgets its last run (and cached approval grants).
    console.api("POST", "/v1/runs", device=device, json={
        "sessionId": session["sessionId"], "input": {"text": "hi"}, "complete": True, "wait": True})
    def last_run() -> str:
        listed = console.api("GET", "/v1/sessions", device=device, params={"limit": 200})["sessions"]
        return str(next(s for s in listed if s["sessionId"] == session["sessionId"]).get("lastRunId", ""))
    assert last_run()
    _card(console, "from-the-console").find_element(By.XPATH, ".//button[text()='Reset']").click()
    console.wait(lambda d: last_run() == "")
    _card(console, "from-the-console").find_element(By.XPATH, ".//button[text()='Branch']").click()
    branch = _card(console, "from-the-console (branch)")
    assert session["sessionId"] in branch.text  # "branched from <id>"
    console.shot("sessions")
    _card(console, "from-the-console").find_element(By.XPATH, ".//button[text()='Clean up']").click()
    console.wait(lambda d: not d.find_elements(By.XPATH, "//article[.//strong[text()='from-the-console']]"))
    archived = console.api("GET", "/v1/sessions", device=device,
                           params={"limit": 200, "include_archived": "true"})
    assert [s.get("archived") for s in archived["sessions"] if s["sessionId"] == session["sessionId"]] == [True]


def test_agents_create_edit_and_bind(console: Console) -> None:
    console.sign_in("admin:ops")
    console.open("agents")
    console.wait(lambda d: d.find_element(By.XPATH, "//button[text()='New agent']")).click()
    _fill(console.driver.find_element(By.ID, "agent-name"), "Helper")
    _fill(console.driver.find_element(By.ID, "agent-prompt"), "You help.")
    _fill(console.driver.find_element(By.ID, "agent-postures"), "add=ask_each_time")
    console.driver.find_element(By.XPATH, "//button[text()='Save']").click()
    card = _card(console, "Helper")
    assert "You help." in card.text and "add: ask_each_time" in card.text
    card.find_element(By.XPATH, ".//button[text()='Edit']").click()
    _fill(console.wait(lambda d: d.find_element(By.ID, "agent-prompt")), "You help briefly.")
    console.driver.find_element(By.XPATH, "//button[text()='Save']").click()
    console.wait(lambda d: "You help briefly." in _card(console, "Helper").text)
    _fill(_card(console, "Helper").find_element(By.CSS_SELECTOR, "input[id^=bind-]"), "helper-key")
    _card(console, "Helper").find_element(By.XPATH, ".//button[text()='Bind']").click()
    console.wait(lambda d: "session key helper-key" in _card(console, "Helper").text)
    console.shot("agents")
    [agent] = [a for a in console.api("GET", "/v1/agents")["agents"] if a.get("displayName") == "Helper"]
    assert agent["systemPrompt"] == "You help briefly."
    assert agent["toolPostures"] == {"add": "TOOL_POSTURE_ASK_EACH_TIME"}
    [binding] = console.api("GET", f"/v1/agents/{agent['agentId']}/bindings")["bindings"]
    assert binding["sessionKey"] == "helper-key"


def test_memory_search_and_delete(console: Console) -> None:
    console.sign_in("admin:ops")
    kept = console.api("POST", "/v1/memory", json={"item": {"text": "the boiler is serviced in May"}})
    console.api("POST", "/v1/memory", json={"item": {"text": "the cat is called Mia"}})
    memory_id = kept["item"]["memoryId"]
    console.open("memory")
    _fill(console.wait(lambda d: d.find_element(By.ID, "memory-query")), "boiler service")
    console.driver.find_element(By.XPATH, "//button[text()='Search']").click()
    first = console.wait(lambda d: d.find_element(By.CSS_SELECTOR, "main article"))
    assert "boiler" in first.text and "score" in first.text
    console.shot("memory")
    first.find_element(By.XPATH, ".//button[text()='Delete']").click()
    console.wait(lambda d: "boiler" not in d.find_element(By.TAG_NAME, "main").text)
    gone = console.api("GET", "/v1/memory", params={"limit": 100})["items"]
    assert memory_id not in [i["memoryId"] for i in gone]
    assert any("Mia" in i["text"] for i in gone)


def test_tokens_issue_and_revoke(console: Console) -> None:
    console.sign_in("admin:ops")
    console.open("ops")
    _fill(console.wait(lambda d: d.find_element(By.ID, "token-principal")), "user:bob")
    console.driver.find_element(By.XPATH, "//button[text()='Issue']").click()
    shown = console.wait(lambda d: d.find_element(By.XPATH, "//p[@role='status']/code")).text
    listed = console.api("GET", "/v1/tokens")["tokens"]
    [bob] = [t for t in listed if t["principal"] == "user:bob"]
    # The new token works for bob, and only until it is revoked from the page.
    headers = {"authorization": f"Bearer {shown}", "x-palyra-device-id": "01J00000000000000000000000"}
    assert httpx.get(console.base + "/v1/sessions", headers=headers).status_code == 200
    row = console.wait(lambda d: d.find_element(By.XPATH, f"//li[code[text()='{bob['tokenId']}']]"))
    row.find_element(By.XPATH, ".//button[text()='Revoke']").click()
    console.wait(lambda d: "revoked" in d.find_element(By.XPATH, f"//li[code[text()='{bob['tokenId']}']]").text)
    console.shot("ops")
    assert httpx.get(console.base + "/v1/sessions", headers=headers).status_code == 401


def test_incident_acknowledged(console: Console) -> None:
    console.sign_in("admin:ops")
    started = console.api("POST", "/v1/runs", principal="user:console", json={
        "sessionKey": "left-waiting", "complete": True,
        "input": {"text": "Start from 0 and add 1 to the running total 1 times, then reply."}})
    run_id = started["run"]["runId"]
    deadline = time.monotonic() + 30
    while True:
        run = console.api("GET", f"/v1/runs/{run_id}")["run"]
        mine = [i for i in console.api("GET", "/v1/incidents").get("incidents", [])
                if run.get("pendingApprovalId") and run["pendingApprovalId"] in i.get("subjectId", "")
                and not i.get("acknowledgedBy")]
        if mine:
            break
        assert time.monotonic() < deadline, "the watchdog raised no incident"
        time.sleep(0.2)
    incident = mine[0]
    console.open("ops")
    row = console.wait(lambda d: d.find_element(
        By.XPATH, f"//li[contains(., {incident['detail']!r}) and .//button[text()='Acknowledge']]"))
    row.find_element(By.XPATH, ".//button[text()='Acknowledge']").click()
    console.wait(lambda d: d.find_elements(
        By.XPATH, f"//li[contains(., {incident['detail']!r}) and contains(., 'acknowledged by admin:ops')]"))
    after = [i for i in console.api("GET", "/v1/incidents")["incidents"]
             if i["incidentId"] == incident["incidentId"]]
    assert after[0]["acknowledgedBy"] == "admin:ops"
    console.api("POST", f"/v1/runs/{run_id}:abort", json={})


def test_background_task_cancelled(console: Console) -> None:
    console.sign_in("admin:ops")
    # A signed Standard Webhooks delivery: its reply goes through the outbox.
    body = json.dumps({"type": "message.created", "data": {
        "text": "hello", "sender": "alice", "conversation_id": "room", "message_id": "m-cancel",
        "is_direct_message": True}}).encode()
    delivered = httpx.post(f"{console.base}/v1/ingress/webhooks/hooks", content=body,
                           headers=webhook_headers(WEBHOOK_SECRET, "msg-cancel", body))
    assert delivered.status_code == 200, delivered.text
    deadline = time.monotonic() + 30
    while not (waiting := [t for t in console.api("GET", "/v1/tasks", params={"kind": "channel.send"})
                           .get("tasks", []) if t["state"] == "BACKGROUND_TASK_STATE_QUEUED"]):
        assert time.monotonic() < deadline, "no reply waiting in the outbox"
        time.sleep(0.2)
    task_id = waiting[0]["taskId"]
    console.open("ops")
    # Queued for its next attempt, or running one: either way it can be cancelled.
    row = console.wait(lambda d: d.find_element(
        By.XPATH, f"//tr[.//code[text()='{task_id}'] and .//button[text()='Cancel']]"))
    assert "queued" in row.text or "running" in row.text
    row.find_element(By.XPATH, ".//button[text()='Cancel']").click()
    console.wait(lambda d: "cancel" in d.find_element(By.XPATH, f"//tr[.//code[text()='{task_id}']]").text)
    task = console.api("GET", f"/v1/tasks/{task_id}")["task"]
    assert task["state"] in ("BACKGROUND_TASK_STATE_CANCELLED", "BACKGROUND_TASK_STATE_CANCEL_REQUESTED")
    assert task["cancelReason"] == "cancelled in the web console"
