"""The web console in a real headless Chromium against a real daemon on loopback.

The flows of issue 29: signing in, a chat turn whose approval is decided in the
console, following a run live, resuming after a reload (Last-Event-ID), an abort,
the journal's verify action, a channel pairing approved, a learning candidate
accepted; the pages on a desktop and a phone screen.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from palyra.cli._session_export import verify_session_file

from .conftest import PHONE, Console, CuttingProxy

pytestmark = pytest.mark.slow

ADD_TWICE = ("Start from 0 and add 1 to the running total 2 times, one add tool call per step, "
             "then reply with the final result.")


def _wait_run(console: Console, run_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        run: dict[str, Any] = console.api("GET", f"/v1/runs/{run_id}")["run"]
        if run["state"] == state or time.monotonic() > deadline:
            assert run["state"] == state, run
            return run
        time.sleep(0.05)


def _start_waiting_run(console: Console, session_key: str) -> dict[str, Any]:
    """A run (started over the API, as another client would) waiting on its first add."""
    started = console.api("POST", "/v1/runs", principal="user:console", json={
        "sessionKey": session_key, "input": {"text": ADD_TWICE}, "complete": True})
    return _wait_run(console, started["run"]["runId"], "RUN_STATE_WAITING_FOR_APPROVAL")


def _approve_until_done(console: Console, run_id: str, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while (run := console.api("GET", f"/v1/runs/{run_id}")["run"])["state"] != "RUN_STATE_DONE":
        assert time.monotonic() < deadline, run
        if run.get("pendingApprovalId"):
            console.api("POST", f"/v1/approvals/{run['pendingApprovalId']}:decide", json={
                "decision": "APPROVAL_DECISION_APPROVE", "scope": "APPROVAL_SCOPE_ONCE"})
        time.sleep(0.05)


def _tape_seqs(console: Console) -> list[int]:
    return [int(li.get_attribute("data-seq") or -1)
            for li in console.driver.find_elements(By.CSS_SELECTOR, ".tape li")]


def test_sign_in_is_required_and_kept_in_the_tab_only(console: Console) -> None:
    console.open("chat")
    console.wait(lambda d: d.find_elements(By.ID, "token"))
    console.shot("sign-in")
    console.driver.find_element(By.ID, "token").send_keys("not-the-token")
    console.driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    console.wait_text("token", css="[role=alert]")
    assert not console.driver.find_elements(By.CSS_SELECTOR, "nav")

    console.driver.find_element(By.ID, "token").clear()
    console.sign_in()
    # The admin token acting as a user sees what that user may see: no operator pages.
    assert console.text("nav .who") == "user:console"
    assert "Channels" not in console.text("nav")
    # The token lives in this tab's sessionStorage; localStorage holds only the
    # browser's device id (no secret), and there are no cookies.
    stored = console.driver.execute_script(
        "return [Object.entries(localStorage), document.cookie, Object.keys(sessionStorage)]")
    assert [k for k, _ in stored[0]] == ["palyra.console.device"]
    assert console.token not in str(stored[0]) and stored[1] == ""
    assert stored[2] == ["palyra.console.credentials"]

    console.sign_in("admin:ops")
    assert console.text("nav .who") == "admin:ops · operator"
    assert all(page in console.text("nav") for page in ("Channels", "Agents", "Tasks & health"))


def test_chat_turn_with_an_approval_decided_in_the_console(console: Console) -> None:
    console.sign_in()
    console.open("chat")
    box = console.wait(lambda d: d.find_element(By.ID, "message"))
    box.send_keys(ADD_TWICE)
    console.driver.find_element(By.CSS_SELECTOR, ".composer button[type=submit]").click()

    card = console.wait(lambda d: d.find_element(By.CSS_SELECTOR, ".approval-card"))
    assert "add" in card.text and "Approve" in card.text
    assert "policy: needs approval" in console.text(".tool-card")
    console.shot("chat-approval")
    console.shot("chat-approval-phone", PHONE)
    Select(card.find_element(By.TAG_NAME, "select")).select_by_visible_text("this session")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    console.wait_text("Approved (session) by user:console", css=".transcript")

    # "ask each time" asks again for the second add, whatever the first answer's scope.
    second = console.wait(lambda d: [c for c in d.find_elements(By.CSS_SELECTOR, ".approval-card")
                                     if c.find_elements(By.CSS_SELECTOR, "button.approve")])[0]
    second.find_element(By.CSS_SELECTOR, "button.approve").click()
    console.wait_text("Approved (once) by user:console", css=".transcript")
    console.wait(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".result.ok")) == 2, timeout=40)
    console.wait_text("run done", css=".transcript", timeout=40)
    console.wait(lambda d: "result=2" in d.find_elements(By.CSS_SELECTOR, ".msg.assistant")[-1].text)
    console.shot("chat-done")

    decided = console.api("GET", "/v1/approvals")["approvals"]
    mine = sorted((a for a in decided if a["decidedBy"] == "user:console" and a["toolName"] == "add"),
                  key=lambda a: int(a["createdAtUnixMs"]))
    assert [a["scope"] for a in mine] == ["APPROVAL_SCOPE_SESSION", "APPROVAL_SCOPE_ONCE"]
    assert "#/chat/" in console.driver.current_url

    # Opening the session again (from the list) shows its latest run.
    console.open("chat")
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".sessions li a"))
    console.driver.find_element(By.XPATH, "//aside//a[contains(., 'Start from 0')]").click()
    console.wait_text("result=2", css=".transcript")
    assert len(console.driver.find_elements(By.CSS_SELECTOR, ".decided.ok")) == 2


def test_follow_a_run_live_and_resume_after_a_reload(console: Console) -> None:
    console.sign_in()
    run = _start_waiting_run(console, "follow-me")
    run_id = run["runId"]
    console.open(f"runs/{run_id}")
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".tape .k-toolApprovalRequest"))
    console.wait_text("live", css="[data-testid=link]")
    before = _tape_seqs(console)
    assert before == sorted(set(before)) and before[0] == 0
    last = before[-1]

    console.network_requests()  # drop what the first load sent
    console.driver.refresh()
    console.wait_text(f"resumed after event {last} (Last-Event-ID)", css="[data-testid=link]")
    console.wait_text("live", css="[data-testid=link]")
    sent = [r for r in console.network_requests() if f"/v1/runs/{run_id}/events" in r["url"]]
    assert sent, "the run view did not reopen its event stream"
    headers = {k.lower(): v for k, v in sent[-1]["headers"].items()}
    assert headers.get("last-event-id") == str(last), headers

    # Another client decides (both adds); the view shows what follows, live, once and in order.
    _approve_until_done(console, run_id)
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".tape .k-messageReplied"), timeout=40)
    console.wait_text("ended", css="[data-testid=link]")
    after = _tape_seqs(console)
    assert after == sorted(set(after)) and after[-1] > last
    stored = console.api("GET", f"/v1/runs/{run_id}/tape", params={"limit": 1000})["events"]
    assert after[-1] == int(stored[-1].get("tapeSeq", 0))
    console.wait_text("done", css="[data-testid=run-state]")
    console.shot("run-view")
    console.shot("run-view-phone", PHONE)

    # Replay from any position: the view restarts at that event.
    start = after[-1] // 2
    field = console.driver.find_element(By.ID, "from")
    field.clear()
    field.send_keys(str(start))
    console.driver.find_element(By.XPATH, "//button[text()='Replay']").click()
    console.wait(lambda d: _tape_seqs(console)[:1] == [start])
    console.wait(lambda d: _tape_seqs(console) == list(range(start, after[-1] + 1)))


def test_abort_from_the_run_view(console: Console) -> None:
    console.sign_in()
    run_id = _start_waiting_run(console, "abort-me")["runId"]
    console.open(f"runs/{run_id}")
    console.wait_text("waiting for approval", css="[data-testid=run-state]")
    console.driver.find_element(By.XPATH, "//button[text()='Abort']").click()
    console.wait_text("cancelled", css="[data-testid=run-state]")
    _wait_run(console, run_id, "RUN_STATE_CANCELLED")
    assert not console.driver.find_elements(By.XPATH, "//button[text()='Abort']")


def test_runs_list_and_approvals_inbox(console: Console) -> None:
    console.sign_in()
    run = _start_waiting_run(console, "inbox")
    console.open("runs")
    row = console.wait(lambda d: d.find_element(By.XPATH, f"//tr[.//code[text()='{run['runId']}']]"))
    assert "waiting for approval" in row.text
    console.shot("runs")
    # A session's earlier run is listed too, not only its latest; the session's
    # button narrows the list to its runs, newest first.
    earlier, later = (console.api("POST", "/v1/runs", principal="user:console", json={
        "sessionKey": "twice", "input": {"text": "hello"}, "complete": True, "wait": True,
    })["run"] for _ in range(2))
    assert earlier["sessionId"] == later["sessionId"]
    console.wait(lambda d: d.find_elements(By.XPATH, f"//code[text()='{earlier['runId']}']"))
    console.driver.find_element(
        By.XPATH, f"//tr[.//code[text()='{earlier['runId']}']]//button").click()
    console.wait(lambda d: not d.find_elements(By.XPATH, f"//code[text()='{run['runId']}']"))
    listed = [c.text for c in console.driver.find_elements(By.CSS_SELECTOR, "tbody tr td:first-child code")]
    assert listed == [later["runId"], earlier["runId"]]

    console.open("approvals")
    card = console.wait(lambda d: d.find_element(
        By.CSS_SELECTOR, f"[data-approval='{run['pendingApprovalId']}']"))
    approval = console.api("GET", f"/v1/approvals/{run['pendingApprovalId']}")["approval"]
    assert approval["policyHash"] in card.text and "risk" in card.text
    assert '"a"' in card.text or "running total" in card.text or "{" in card.text
    console.shot("approvals")
    card.find_element(By.CSS_SELECTOR, "button.deny").click()
    console.wait(lambda d: d.find_elements(
        By.CSS_SELECTOR, f"tr[data-approval='{run['pendingApprovalId']}']"), timeout=20)
    decided = console.text(f"tr[data-approval='{run['pendingApprovalId']}']")
    assert "denied" in decided and "user:console" in decided


def test_journal_verify_and_export(console: Console, tmp_path: Path) -> None:
    console.sign_in("admin:ops")  # verify and export are operators' (app/_access.py)
    session_id = console.api("POST", "/v1/runs", json={
        "sessionKey": "bundle-me", "input": {"text": "hello"}, "complete": True,
        "wait": True})["session"]["sessionId"]
    console.open("journal")
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-testid=event-count]"))
    console.driver.find_element(By.XPATH, "//button[text()='Verify now']").click()
    console.wait_text("Intact", css="[data-testid=verify-result]", timeout=60)
    head = console.api("GET", "/v1/journal/head")
    shown = console.text("[data-testid=verify-result]")
    verified = int(shown.split("Intact: ")[1].split(" ")[0])
    assert 0 < verified <= int(head["eventCount"])
    # The determinate bar (WatchJournalVerify's progress) stays full at the end.
    bar = console.driver.find_element(By.CSS_SELECTOR, "[data-testid=verify-progress]")
    assert bar.get_attribute("value") == bar.get_attribute("max") == str(verified)
    assert console.text("[data-testid=verify-checked]") == (
        f"{verified} / {verified} positions checked")

    # The last signed checkpoint comes with the head: signing one moves it to the head.
    console.driver.find_element(By.XPATH, "//button[text()='Sign the head now']").click()
    def shown_is_latest(d: Any) -> bool:
        latest = console.api("GET", "/v1/journal/head").get("lastCheckpoint", {})
        at = d.find_elements(By.CSS_SELECTOR, "[data-testid=checkpoint-position]")
        return (int(latest.get("position", 0)) >= int(head["headPosition"])
                and bool(at) and at[0].text.split(" ")[0] == latest["position"])
    console.wait(shown_is_latest)
    signed = console.api("GET", "/v1/journal/head")["lastCheckpoint"]
    assert console.text("[data-testid=checkpoint-key]") == signed["publicKey"]

    field = console.driver.find_element(By.ID, "export-session")
    field.send_keys(session_id)
    console.driver.find_element(By.XPATH, "//button[text()='Export']").click()
    link = console.wait(lambda d: d.find_element(By.PARTIAL_LINK_TEXT, "Download"))
    assert link.text == f"Download palyra-{session_id}.ndjson"
    console.shot("journal")
    # Download it as a user would: the saved file is the session's records with their
    # inclusion proofs (it grows with the session), and it verifies offline.
    console.driver.execute_cdp_cmd("Browser.setDownloadBehavior", {
        "behavior": "allow", "downloadPath": str(tmp_path), "eventsEnabled": True})
    link.click()
    bundle = tmp_path / f"palyra-{session_id}.ndjson"
    console.wait(lambda d: bundle.exists() and bundle.stat().st_size > 0)
    ok, summary = verify_session_file(bundle, ())
    assert ok and f"session={session_id}" in summary, summary
    events = re.search(r" events=(\d+) ", summary)
    assert events is not None and int(events.group(1)) > 0, summary


def test_channel_pairing_request_approved_in_the_console(console: Console) -> None:
    console.sign_in("admin:ops")
    channel = "slack:T0123"
    code = console.api("POST", f"/v1/channels/{channel}/pairing-codes", json={})["code"]["code"]
    asked = console.api("POST", f"/v1/channels/{channel}/messages:route", json={"message": {
        "text": f"pair {code}", "senderHandle": "U1", "isDirectMessage": True,
        "adapterMessageId": "m-pair"}})
    assert "approval" in asked["outputs"][0]["text"]
    console.open("channels")
    card = console.wait(lambda d: d.find_element(By.CSS_SELECTOR, ".approval-card"))
    assert "dm_pairing" in card.text
    Select(card.find_element(By.TAG_NAME, "select")).select_by_visible_text("timeboxed")
    ttl = card.find_element(By.CSS_SELECTOR, "input[type=number]")
    ttl.clear()
    ttl.send_keys("28800")
    console.shot("channels")
    card.find_element(By.CSS_SELECTOR, "button.approve").click()
    console.wait_text("No sender waits for a pairing.")
    [grant] = console.api("GET", f"/v1/channels/{channel}/grants")["grants"]
    assert grant["sender"] == "u1"
    assert int(grant["expiresAtUnixMs"]) - int(grant["grantedAtUnixMs"]) == 28800 * 1000

    # The configured channels are listed with their health (ListChannels); the
    # channel's own view, opened from its row, lists the new grant; revoking it there
    # removes it.
    listed = {c["channel"]: c for c in console.api("GET", "/v1/channels")["channels"]}
    hooks = console.wait(lambda d: d.find_element(By.CSS_SELECTOR, "tr[data-channel='webhook:hooks']"))
    cells = [td.text for td in hooks.find_elements(By.TAG_NAME, "td")]
    assert cells[:5] == ["webhook:hooks", "webhook", "replies", "allow", "2"]
    assert cells[7] == listed["webhook:hooks"].get("quarantined", "0")
    row = console.driver.find_element(By.CSS_SELECTOR, f"tr[data-channel='{channel}']")
    assert [td.text for td in row.find_elements(By.TAG_NAME, "td")][1:4] == ["rpc", "inbound only", "pairing"]
    row.find_element(By.XPATH, ".//button[text()='Show']").click()
    row = console.wait(lambda d: d.find_element(By.XPATH, "//li[starts-with(normalize-space(.), 'u1 ')]"))
    assert "Revoke" in row.text
    row.find_element(By.XPATH, ".//button[text()='Revoke']").click()
    console.wait(lambda d: not d.find_elements(By.XPATH, "//li[starts-with(normalize-space(.), 'u1 ')]"))
    assert console.api("GET", f"/v1/channels/{channel}/grants").get("grants", []) == []


def test_learning_candidate_accepted_in_the_console(console: Console) -> None:
    console.sign_in()
    done = console.api("POST", "/v1/runs", principal="user:console", json={
        "sessionKey": "learning", "input": {"text": "I prefer short answers."},
        "complete": True, "wait": True})
    run_id = done["run"]["runId"]
    deadline = time.monotonic() + 30
    while not (found := console.api("GET", "/v1/learning/candidates",
                                    params={"run_id": run_id}).get("candidates")):
        assert time.monotonic() < deadline, "no candidate from the reflection"
        time.sleep(0.1)
    candidate = found[0]
    assert candidate["state"] == "LEARNING_CANDIDATE_STATE_PENDING_REVIEW"
    console.open("learning")
    card = console.wait(lambda d: d.find_element(
        By.CSS_SELECTOR, f"[data-candidate='{candidate['candidateId']}']"))
    assert "short answers" in card.text
    console.shot("learning")
    card.find_element(By.XPATH, ".//button[text()='Accept']").click()
    console.wait(lambda d: "accepted" in d.find_element(
        By.CSS_SELECTOR, f"[data-candidate='{candidate['candidateId']}'] [data-testid=candidate-state]").text)
    after = console.api("GET", "/v1/learning/candidates", params={"run_id": run_id})["candidates"][0]
    assert after["state"] == "LEARNING_CANDIDATE_STATE_ACCEPTED"
    assert after["decidedBy"] == "user:console"


@pytest.mark.parametrize("page", ["sessions", "agents", "memory", "ops"])
def test_other_pages_render_for_an_operator(console: Console, page: str) -> None:
    console.sign_in("admin:ops")
    console.open(page)
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "main h2"))
    console.wait(lambda d: not d.find_elements(By.CSS_SELECTOR, "[role=alert]") or True)
    alerts = [a.text for a in console.driver.find_elements(By.CSS_SELECTOR, "[role=alert]")]
    assert alerts == [], alerts
    console.shot(page)


def test_run_view_resumes_after_a_dropped_connection(console: Console, proxy: CuttingProxy) -> None:
    via = f"http://127.0.0.1:{proxy.port}"  # the browser reaches the daemon through the relay
    console.sign_in(base=via)
    run = _start_waiting_run(console, "flaky-network")
    run_id = run["runId"]
    console.open(f"runs/{run_id}", base=via)
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".tape .k-toolApprovalRequest"))
    console.wait_text("live", css="[data-testid=link]")
    last = _tape_seqs(console)[-1]

    console.network_requests()
    assert proxy.cut() > 0
    console.wait_text("1 reconnects", css="[data-testid=link]")
    console.wait_text("live", css="[data-testid=link]")
    everything = console.network_requests()
    sent = [r for r in everything if f"/v1/runs/{run_id}/events" in r["url"]]
    assert sent, f"the run view did not reopen its event stream: {[r['url'] for r in everything]}"
    headers = {k.lower(): v for k, v in sent[-1]["headers"].items()}
    assert headers.get("last-event-id") == str(last), headers

    _approve_until_done(console, run_id)
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, ".tape .k-messageReplied"), timeout=40)
    seqs = _tape_seqs(console)
    stored = console.api("GET", f"/v1/runs/{run_id}/tape", params={"limit": 1000})["events"]
    assert seqs == [int(e.get("tapeSeq", 0)) for e in stored]  # every event once, in order
    console.shot("run-view-after-a-dropped-connection")


def test_each_principal_sees_only_what_it_may(console: Console) -> None:
    theirs = console.api("POST", "/v1/runs", principal="user:other", json={
        "sessionKey": "not-yours", "input": {"text": ADD_TWICE}, "complete": True})["run"]
    waiting = _wait_run(console, theirs["runId"], "RUN_STATE_WAITING_FOR_APPROVAL")
    approval = f"[data-approval='{waiting['pendingApprovalId']}']"
    mine = _start_waiting_run(console, "mine")
    console.sign_in("user:console")
    console.open("approvals")
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, f"[data-approval='{mine['pendingApprovalId']}']"))
    assert not console.driver.find_elements(By.CSS_SELECTOR, approval)
    console.open("runs")
    console.wait(lambda d: d.find_elements(By.XPATH, f"//code[text()='{mine['runId']}']"))
    assert not console.driver.find_elements(By.XPATH, f"//code[text()='{theirs['runId']}']")

    console.sign_in("admin:ops")  # an operator sees everything
    console.open("approvals")
    console.wait(lambda d: d.find_elements(By.CSS_SELECTOR, approval))
    console.open("runs")
    console.wait(lambda d: d.find_elements(By.XPATH, f"//code[text()='{theirs['runId']}']"))
    for run in (theirs, mine):
        console.api("POST", f"/v1/runs/{run['runId']}:abort", json={})


def test_a_long_tape_opens_at_its_tail_and_the_page_keeps_a_window(console: Console) -> None:
    console.sign_in()
    words = " ".join(f"w{i}" for i in range(1500))
    run = console.api("POST", "/v1/runs", principal="user:console", json={
        "sessionKey": "long", "input": {"text": words}, "complete": True, "wait": True})["run"]
    tape_len = int(run["tapeLen"])
    assert tape_len > 1500
    console.open(f"runs/{run['runId']}")
    console.wait_text("ended", css="[data-testid=link]")
    assert _tape_seqs(console) == list(range(tape_len - 500, tape_len))
    assert "dropped" not in console.text("[data-testid=link]")  # started at the tail
    # Replaying from the start streams every event through, and the page still holds 500.
    field = console.driver.find_element(By.ID, "from")
    field.clear()
    field.send_keys("0")
    console.driver.find_element(By.XPATH, "//button[text()='Replay']").click()
    console.wait_text(f"{tape_len - 500} earlier ones dropped from view", css="[data-testid=link]")
    assert _tape_seqs(console) == list(range(tape_len - 500, tape_len))
