"""``palyra chat``: an interactive run over RunStream that explains itself.

It resolves its session first (``--session KEY``, else a new one), prints a
short banner, then streams the model's tokens, shows tool calls and results,
and asks inline when a tool call needs approval: the answer goes back on the
same stream, and a decision made elsewhere (``palyra approvals approve``)
cancels the question. Each line you type is one more input to the same run.

Slash commands are answered by the CLI itself, never sent to the model (see
``HELP``). An empty line is ignored. Ctrl-D at the prompt ends the chat (the
run completes once its loop is idle); Ctrl-D at an approval question leaves
that approval pending, to be decided from another shell or to time out.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import AsyncIterator

import betterproto2
from palyra_gen.palyra import v1

from palyra.cli._client import Stubs, add_connection_flags, connect, report_error, resolve_target
from palyra.cli._render import Progress, enum_name
from palyra.cli._sessions import POSTURES, set_posture
from palyra.cli._stdin import StdinLines
from palyra.core.ids import new_ulid

_TERMINAL = {v1.RunState.DONE, v1.RunState.FAILED, v1.RunState.CANCELLED}

HELP = """commands (answered here, never sent to the model):
  /help                     this list
  /status                   the run: state, turns, tool calls, pending approval
  /posture TOOL POSTURE     how TOOL is gated in this session: always_allow,
                            ask_each_time, disabled or inherit (the configured one)
  /abort                    cancel the run now (the chat ends)
  /quit                     end the chat; the run completes (also /exit, Ctrl-D)
an empty line is ignored; anything else is sent to the agent."""

# answer -> (decision, scope); "a" also sets the session's posture first.
_DECISIONS = {
    "y": (v1.ApprovalDecision.APPROVE, v1.ApprovalScope.ONCE),
    "s": (v1.ApprovalDecision.APPROVE, v1.ApprovalScope.SESSION),
    "a": (v1.ApprovalDecision.APPROVE, v1.ApprovalScope.ONCE),
    "n": (v1.ApprovalDecision.DENY, v1.ApprovalScope.ONCE),
}
_APPROVAL_CHOICES = """  y  allow this call once
  s  allow this exact call (same tool, same arguments) again in this session, no question
  a  always allow {tool} in this session, any arguments (sets the session's posture)
  n  deny this call
  Ctrl-D leaves it pending: decide later with `palyra approvals approve|deny {approval_id}`"""


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``chat``."""
    chat = commands.add_parser(
        "chat", help="talk to the agent interactively (/help inside for commands)",
        description="Talk to the agent. Inside the chat, /help lists the commands "
                    "(/status, /posture TOOL POSTURE, /abort, /quit).")
    chat.add_argument("--session", default="", help="session key to continue (default: new)")
    chat.add_argument("--message", "-m", default="",
                      help="send this one message, print the answer and exit")
    chat.add_argument("--yes", action="store_true", help="approve every tool call once")
    add_connection_flags(chat)
    chat.set_defaults(handler=lambda args: asyncio.run(_chat(args)))


class ChatEnded(Exception):
    """The chat ends at once (end of input at an approval question)."""


class _Chat:
    def __init__(self, args: argparse.Namespace, lines: StdinLines, stubs: Stubs,
                 session: v1.Session) -> None:
        self.args = args
        self.lines = lines
        self.stubs = stubs
        self.session = session
        self.outbox: asyncio.Queue[v1.RunStreamRequest | None] = asyncio.Queue()
        self.asking: dict[str, asyncio.Task[None]] = {}
        self.answered: set[str] = set()  # approvals decided from this chat
        self.waiting = Progress("thinking…")
        self.run_id = ""
        self.closed = False
        self.streamed = False  # this turn's reply already shown as model tokens

    async def requests(self) -> AsyncIterator[v1.RunStreamRequest]:
        while (item := await self.outbox.get()) is not None:
            yield item

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.outbox.put_nowait(None)

    # -- what the user types -------------------------------------------------
    async def read_message(self, prompt: str) -> str | None:
        """The next line meant for the agent; None when the chat should end."""
        while True:
            line = await self.lines.get(prompt)
            if line is None:
                print("\n(end of input: the chat ends; the run completes)", flush=True)
                return None
            text = line.strip()
            if not text:
                continue  # an empty line is ignored, never sent
            if not text.startswith("/"):
                return line
            if not await self.command(text):
                return None

    async def command(self, text: str) -> bool:
        """Run one slash command; False when the chat should end."""
        name, *rest = text.split()
        if name in ("/quit", "/exit"):
            return False
        if name == "/help":
            print(HELP, flush=True)
        elif name == "/status":
            await self.status()
        elif name == "/posture":
            await self.posture(rest)
        elif name == "/abort":
            if not self.run_id:
                print("no run yet: nothing to abort", flush=True)
                return True
            await self.stubs.gateway.abort_run(v1.AbortRunRequest(run_id=self.run_id,
                                                                  reason="aborted from chat"))
            print(f"run {self.run_id} aborted", flush=True)
            return False
        else:
            print(f"unknown command {name}; /help lists them (to send a line starting "
                  "with / to the agent, start it with a space)", flush=True)
        return True

    async def status(self) -> None:
        if not self.run_id:
            print(f"session {self.session.session_key}: no run yet", flush=True)
            return
        run = (await self.stubs.gateway.get_run(v1.GetRunRequest(run_id=self.run_id))).run
        if run is None:
            return
        pending = f", waiting for approval {run.pending_approval_id}" if (
            run.pending_approval_id) else ""
        print(f"run {run.run_id}: {enum_name(run.state)}, {run.turn_count} turns, "
              f"{run.tool_call_count} tool calls{pending} (session "
              f"{self.session.session_key})", flush=True)

    async def posture(self, words: list[str]) -> None:
        if len(words) != 2 or words[1] not in POSTURES:
            print(f"usage: /posture TOOL {{{'|'.join(POSTURES)}}}", flush=True)
            return
        try:
            self.session = await set_posture(self.stubs, self.session.session_id, *words)
        except Exception as exc:
            report_error(exc)
            return
        print(f"{words[0]}: {words[1]} in this session", flush=True)

    async def next_input(self) -> None:
        if self.args.message:
            self.close()
            return
        line = await self.read_message("\nyou> ")
        if line is None:
            self.close()
            return
        self.outbox.put_nowait(v1.RunStreamRequest(v=1, input=v1.MessageInput(text=line)))
        self.waiting.start()

    # -- approvals -----------------------------------------------------------
    async def ask(self, request: v1.ToolApprovalRequest) -> None:
        if self.args.yes:
            self.decide(request, "y")
            return
        left = max(0, round((request.expires_at_unix_ms - time.time() * 1000) / 1000))
        summary = request.prompt.summary if request.prompt else request.tool_name
        print(f"\n? approval needed: {summary}\n  (approval {request.approval_id}, "
              f"expires in {left} s)\n"
              + _APPROVAL_CHOICES.format(tool=request.tool_name,
                                         approval_id=request.approval_id), flush=True)
        while True:
            line = await self.lines.get("answer [y/s/a/n]: ")
            if line is None:
                # End of input: no prompt can follow, so end now rather than sit
                # silent until someone else decides (the run waits durably).
                print(f"\n(end of input: the chat ends now; approval {request.approval_id} "
                      f"stays pending and run {self.run_id} waits for it: decide it with "
                      f"`palyra approvals approve|deny {request.approval_id}`, or it times "
                      "out)", flush=True)
                self.close()
                raise ChatEnded
            answer = line.strip().lower()[:1]
            if answer in _DECISIONS:
                break
            print("please answer y, s, a or n", flush=True)
        if answer == "a":
            await self.posture([request.tool_name, "always_allow"])
        self.decide(request, answer)

    def decide(self, request: v1.ToolApprovalRequest, answer: str) -> None:
        decision, scope = _DECISIONS[answer]
        self.answered.add(request.approval_id)
        self.outbox.put_nowait(v1.RunStreamRequest(
            v=1, run_id=self.run_id, approval=v1.InlineApprovalDecision(
                approval_id=request.approval_id, decision=decision, scope=scope)))

    # -- what the run says ---------------------------------------------------
    def show(self, event: v1.TapeEvent, tg: asyncio.TaskGroup) -> bool:
        """Render one event; return True when the run ended."""
        self.run_id = event.run_id or self.run_id
        kind, body = betterproto2.which_one_of(event, "event")
        if isinstance(body, v1.ModelToken):
            self.waiting.clear()
            self.streamed = True
            sys.stdout.write(body.token)
            sys.stdout.flush()
        elif isinstance(body, v1.MessageReplied):
            # A reply not streamed as tokens is taped only here (docs/journal/format.md,
            # "Run tape events"): shown whole, once.
            if not self.streamed:
                self.waiting.clear()
                sys.stdout.write(body.reply_text)
                sys.stdout.flush()
            self.streamed = False
        elif isinstance(body, v1.AgentLoop) and body.phase != v1.AgentLoopPhase.TERMINATED:
            self.streamed = False  # a turn's bounds: a reply after them was not streamed
        elif isinstance(body, v1.ToolProposal):
            self.waiting.clear()
            print(f"\n  ⚙ {body.tool_name}({body.input_json})", flush=True)
        elif isinstance(body, v1.ToolResult):
            shown = body.output_json if body.success else f"error: {body.error}"
            print(f"  → {shown}", flush=True)
        elif isinstance(body, v1.ToolApprovalRequest):
            self.waiting.clear()
            self.asking[body.approval_id] = tg.create_task(self.ask(body))
        elif isinstance(body, v1.ToolApprovalResponse):
            task = self.asking.pop(body.approval_id, None)
            if task is not None:
                task.cancel()
                if body.approval_id not in self.answered:
                    print(f"\n  (decided elsewhere by {body.decided_by}: "
                          f"{'approved' if body.approved else 'denied'})", flush=True)
        elif isinstance(body, v1.AgentLoop):  # TERMINATED
            self.streamed = False
            tg.create_task(self.next_input())
        elif isinstance(body, v1.RunStatus) and body.state in _TERMINAL:
            print(f"\n[run {event.run_id} {enum_name(body.state)}"
                  f"{': ' + body.reason if body.reason else ''}]", flush=True)
            return True
        elif kind == "error" and isinstance(body, v1.RunError):
            print(f"\n[error {enum_name(body.code)}: {body.message}]", file=sys.stderr, flush=True)
        return False


async def _open_session(stubs: Stubs, key: str) -> v1.Session:
    answer = await stubs.gateway.resolve_session(
        v1.ResolveSessionRequest(session_key=key or f"chat-{new_ulid().lower()}"))
    if answer.session is None:
        raise RuntimeError("the daemon answered ResolveSession without the session")
    return answer.session


def _banner(args: argparse.Namespace, session: v1.Session) -> str:
    target = resolve_target(args)
    who = target.metadata.get("x-palyra-principal", "?")
    return (f"palyra chat: {target.host}:{target.port} as {who}, session "
            f"{session.session_key}\n/help lists commands; an empty line is ignored; "
            "Ctrl-D or /quit ends the chat.")


async def _chat(args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            session = await _open_session(stubs, args.session)
            lines = StdinLines()
            chat = _Chat(args, lines, stubs, session)
            if args.message:
                first: str | None = args.message
            else:
                print(_banner(args, session), flush=True)
                first = await chat.read_message("you> ")
            if first is None:
                return 0
            chat.outbox.put_nowait(v1.RunStreamRequest(
                v=1, session_id=session.session_id, input=v1.MessageInput(text=first),
                batch=True))
            chat.waiting.start()
            try:
                await _follow(chat, stubs)
            except* ChatEnded:
                chat.waiting.clear()
    except Exception as exc:
        return report_error(exc)
    return 0


async def _follow(chat: _Chat, stubs: Stubs) -> None:
    """Show the run's stream, asking and answering, until the run ends."""
    async with asyncio.TaskGroup() as tg:
        ticker = tg.create_task(_tick(chat.waiting))
        try:
            async for response in stubs.gateway.run_stream(chat.requests()):
                # One response per commit (batch=True on the first request).
                if any(chat.show(event, tg) for event in response.events):
                    break
        finally:
            ticker.cancel()
            for task in chat.asking.values():
                task.cancel()
            chat.close()


async def _tick(progress: Progress) -> None:
    while True:
        await asyncio.sleep(0.2)
        progress.tick()
