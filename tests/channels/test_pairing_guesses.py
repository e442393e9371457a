"""Pairing codes cannot be guessed without limit (issue 35, item 6), through ``palyra serve``.

300 wrong ``pair XXXXXXXX`` DMs from 300 senders: only the channel's budget of guesses
is admitted (the rest are refused before anything is journaled, so the journal grows by
a bounded amount), wrong guesses lock the channel's pending codes, and one sender alone
gets only its own smaller budget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from palyra.channels.guesses import LOCK_AFTER, PER_CHANNEL, PER_SENDER, GuessLimiter
from palyra.testing.spawn import DaemonProcess, clean_env
from tests.channels.conftest import admin_headers, journal_head

CHANNEL = "webhook:ops"


def _guess(base: str, headers: dict[str, str], channel: str, sender: str, code: str,
           n: int) -> dict[str, Any]:
    answer = httpx.post(f"{base}/v1/channels/{channel}/messages:route", headers=headers,
                        json={"message": {"text": f"pair {code}", "senderHandle": sender,
                                          "isDirectMessage": True, "adapterMessageId": f"g{n}"}},
                        timeout=40)
    assert answer.status_code == 200, answer.text
    return answer.json()  # type: ignore[no-any-return]


@pytest.mark.slow
def test_guessing_is_bounded_and_locks_the_codes(tmp_path: Path) -> None:
    config = tmp_path / "palyra.toml"
    config.write_text(f'[channels.policy."{CHANNEL}"]\ndm_policy = "pairing"\n'
                      '[channels.policy."webhook:solo"]\ndm_policy = "pairing"\n')
    with DaemonProcess(tmp_path / "data", env=clean_env(),
                       extra_args=("--config", str(config))) as daemon:
        base, token = f"http://127.0.0.1:{daemon.http_port}", daemon.token
        admin = admin_headers(token)
        issued = httpx.post(f"{base}/v1/channels/{CHANNEL}/pairing-codes", headers=admin,
                            json={"ttlSeconds": 3600})
        code = issued.json()["code"]["code"]
        wrong = "0000000" + ("1" if code != "00000001" else "2")
        connector = {**admin, "x-palyra-principal": f"channel:{CHANNEL}"}
        before = journal_head(base, token)
        reasons = [_guess(base, connector, CHANNEL, f"s{i}", wrong, i)["decisionReason"]
                   for i in range(300)]
        limited = reasons.count("pairing_rate_limited")
        assert limited == 300 - PER_CHANNEL, reasons[:20]
        grown = journal_head(base, token) - before
        assert grown <= PER_CHANNEL * 8 + 4, grown  # a handful of events per admitted guess
        # The wrong guesses locked the code: nobody can use it any more.
        codes = httpx.get(f"{base}/v1/channels/{CHANNEL}/pairing-codes", headers=admin).json()
        assert codes.get("codes", []) == []

        solo = {**admin, "x-palyra-principal": "channel:webhook:solo"}
        alone = [_guess(base, solo, "webhook:solo", "mallory", wrong, 1000 + i)["decisionReason"]
                 for i in range(PER_SENDER + 3)]
        assert alone.count("pairing_rate_limited") == 3, alone


def test_the_budgets_slide_and_the_lock_counts_wrong_guesses() -> None:
    limiter = GuessLimiter(window_ms=1000)
    assert all(limiter.admit("c", "a", 0) for _ in range(PER_SENDER))
    assert not limiter.admit("c", "a", 999)
    others = [limiter.admit("c", f"s{i}", 999) for i in range(PER_CHANNEL)]
    assert others.count(False) == PER_SENDER  # the channel's budget is shared
    assert limiter.admit("c", "a", 1000)  # a's guesses left the window
    assert limiter.admit("d", "a", 1000)  # another channel has its own budget
    locks = [limiter.wrong("c", t) for t in range(LOCK_AFTER * 2)]
    assert locks.count(True) == 2 and locks[LOCK_AFTER - 1]
    assert not any(limiter.wrong("c", 5000 + t * 1000) for t in range(LOCK_AFTER * 2))
    bounded = GuessLimiter(max_keys=10)
    for i in range(1000):
        bounded.admit("c", f"s{i}", 0)
    assert len(bounded._by_sender) <= 10
