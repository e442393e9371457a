"""What the router says on its own so a channel user is never left in silence (pure).

An unpaired direct message gets told how to pair (at most once per sender per
``pairing_hint_interval_s``); a pairing decision is told to the sender who
asked; a run that waits for a tool approval tells its conversation who can
decide it, and again once it is decided or times out. Each notice is a
reply with a fixed idempotency key, so a retried dispatch never says it twice.
"""

from __future__ import annotations

import datetime

PAIRING_HINT = ("I only answer paired senders on this channel. Ask the operator of this "
                "agent for a pairing code, then send me: pair CODE")


def hint_due(last_ms: int | None, now_ms: int, interval_s: int) -> bool:
    """Whether a sender last told how to pair at ``last_ms`` (None: never) is told again.

    ``interval_s`` 0 turns the hint off.
    """
    if interval_s <= 0:
        return False
    return last_ms is None or now_ms - last_ms >= interval_s * 1000


def pairing_decided(approved: bool, expires_ms: int = 0) -> str:
    """The sender's answer once an operator decided their pairing request."""
    if not approved:
        return "Your pairing request was denied."
    return ("Your pairing request was approved: you can talk to me here now"
            + (f" (until {_utc(expires_ms)})." if expires_ms else "."))


def approval_pending(approval_id: str, tool_name: str) -> str:
    """The conversation's notice that its run waits for an operator's approval."""
    return (f"Waiting for an operator to approve {tool_name} (approval {approval_id}). "
            f"An operator decides it with `palyra approvals approve {approval_id}` "
            f"(or `deny`), or in the console.")


def approval_resolved(approval_id: str, tool_name: str, state: str) -> str:
    """The conversation's notice once the approval left ``pending``."""
    said = {"approved": "was approved; continuing", "denied": "was denied",
            "timed_out": "timed out without a decision", "expired": "expired",
            "cancelled": "was cancelled"}.get(state, f"ended ({state})")
    return f"The approval of {tool_name} (approval {approval_id}) {said}."


def _utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M UTC")
