"""Built-in channel commands (``/status``, ``/cancel``, ``/reset``) and pairing requests.

They run as ``channel.command`` tasks with workers of their own, so a
``/cancel`` is answered even while every dispatch worker waits on a long run.
Whether a sender may run a command is the policy gate's decision; this module
only carries it out and journals who asked.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from palyra.channels import notices
from palyra.channels.config import ChannelsConfig
from palyra.channels.outbox import OutboundReply, queue_send
from palyra.channels.pairing import PairingBook, PairingGrantRec
from palyra.channels.records import InboundRec
from palyra.channels.routing import Decision, Envelope
from palyra.engine import (
    ApprovalDecision,
    ApprovalRecord,
    Engine,
    IdentityRec,
    Selectors,
)
from palyra.journal import EventDraft, JournalStore
from palyra.policy import PolicyGate
from palyra.tasks import TaskQueue


def channel_identity(channel: str) -> IdentityRec:
    """Who the router acts as on ``channel``'s behalf."""
    return IdentityRec(f"channel:{channel}", "", channel)


def active_run(engine: Engine, session_key: str) -> str:
    """The run still going in the session ``session_key`` names ("" when none)."""
    session = engine.session_reader.by_key(session_key)
    if session is None or not session.last_run_id:
        return ""
    run_id = session.last_run_id
    return run_id if engine.phase_of(run_id) is not None else ""


async def decide_pairing(pairing: PairingBook, tasks: TaskQueue, record: ApprovalRecord,
                         decision: ApprovalDecision) -> ApprovalRecord:
    """Decide a pairing approval and, when the request came with a reply route, tell the
    sender in the same commit (a crash never keeps the decision and loses the notice)."""
    args = json.loads(record.args_json)
    sink = args.get("sink", "")
    if not sink:
        return await pairing.decide(record, decision)

    async def commit(drafts: list[EventDraft], _new: ApprovalRecord,
                     grant: PairingGrantRec | None) -> None:
        await queue_send(tasks, OutboundReply(
            sink=sink, key=f"pairing:{record.approval_id}",
            text=notices.pairing_decided(grant is not None, grant.expires_ms if grant else 0),
            conversation_id=args.get("conversation_id", ""),
            thread_id=args.get("thread_id", "")), also=drafts)

    return await pairing.decide(record, decision, commit=commit)


class Commands:
    """Answers pairing requests and built-in commands with one reply text each."""

    def __init__(self, store: JournalStore, engine: Engine, pairing: PairingBook,
                 gate: PolicyGate, config: ChannelsConfig,
                 now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._store = store
        self._now = now_ms
        self._engine = engine
        self._pairing = pairing
        self._gate = gate
        self._config = config

    async def pair(self, msg: InboundRec) -> str:
        """Use the message's pairing code (opens an approval) and say what happened."""
        env = msg.envelope
        if self._pairing.paired(env.channel, env.sender):
            return "You are already paired on this channel."
        route = {"sink": msg.sink, "conversation_id": env.conversation_id,
                 "thread_id": env.thread_id} if msg.sink else None
        approval = await self._pairing.request(env.channel, env.sender,
                                               msg.decision.pairing_code, reply_route=route)
        if approval is None:
            if self._pairing.guesses.wrong(env.channel, self._now()):
                await self._pairing.lock_codes(env.channel)
            return "That pairing code is unknown or expired."
        return ("Pairing requested; an operator will approve or deny it "
                f"(approval {approval.approval_id}).")

    async def command(self, msg: InboundRec) -> str:
        """Run the message's command if the gate allows this sender; journal the attempt."""
        env, decision = msg.envelope, msg.decision
        policy = self._config.policy_for(env.channel)
        owner = (env.sender == self._pairing.owner(env.channel) or (
            env.sender in policy.allow_from and (env.sender_verified or not policy.strict_allow)))
        verdict = self._gate.check_channel_command(
            f"channel:{env.channel}", decision.command, channel=env.channel, sender=env.sender,
            admitted=True, owner=owner, verified=env.sender_verified)
        if not verdict.allowed:
            text = f"{decision.command} is not allowed for you here."
        else:
            text = await self._run(decision.command, env, decision)
        await self._store.append([EventDraft(
            kind="channel.command", actor=f"channel:{env.channel}",
            principal=f"channel:{env.channel}",
            payload={"channel": env.channel, "sender": env.sender, "command": decision.command,
                     "allowed": verdict.allowed, "reason": verdict.reason,
                     "policy_hash": verdict.policy_hash})])
        return text

    async def _run(self, command: str, env: Envelope, decision: Decision) -> str:
        identity = channel_identity(env.channel)
        session = self._engine.session_reader.by_key(decision.session_key)
        if command == "/status":
            if session is None:
                return "No conversation yet."
            last = ""
            if session.last_run_id:
                run = self._engine.get_run(identity, session.last_run_id)
                last = f"; last run {run.run_id} is {run.state}"
            return f"Session {session.session_id}: {session.run_count} runs{last}."
        if command == "/cancel":
            run_id = active_run(self._engine, decision.session_key)
            if not run_id:
                return "Nothing is running."
            cancelled, _rec = await self._engine.abort_run(identity, run_id, "channel /cancel")
            return f"Cancelled run {run_id}." if cancelled else f"Run {run_id} already ended."
        if session is not None:  # /reset
            await self._engine.session_writer.resolve(
                identity, Selectors(session_key=decision.session_key, reset=True))
        return "Started a new conversation."
