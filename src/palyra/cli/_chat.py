"""``palyra chat``: an interactive run over RunStream.

Streams the model's tokens, shows tool calls and results, and asks inline
when a tool call needs approval (the answer goes back on the same stream; a
decision made elsewhere, e.g. ``palyra approvals approve``, cancels the
question). Each line you type is one more input to the same run; an empty
line, ``/quit`` or end of input half-closes the stream and the run ends.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator

import betterproto2
from palyra_gen.palyra import v1

from palyra.cli._client import add_connection_flags, connect, report_error
from palyra.cli._render import Progress, enum_name
from palyra.cli._stdin import StdinLines

_TERMINAL = {v1.RunState.DONE, v1.RunState.FAILED, v1.RunState.CANCELLED}
_ANSWERS = {
    "y": (v1.ApprovalDecision.APPROVE, v1.ApprovalScope.ONCE),
    "s": (v1.ApprovalDecision.APPROVE, v1.ApprovalScope.SESSION),
    "n": (v1.ApprovalDecision.DENY, v1.ApprovalScope.ONCE),
}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``chat``."""
    chat = commands.add_parser("chat", help="talk to the agent interactively")
    chat.add_argument("--session", default="", help="session key to continue (default: new)")
    chat.add_argument("--message", "-m", default="",
                      help="send this one message, print the answer and exit")
    chat.add_argument("--yes", action="store_true", help="approve every tool call once")
    add_connection_flags(chat)
    chat.set_defaults(handler=lambda args: asyncio.run(_chat(args)))


class _Chat:
    def __init__(self, args: argparse.Namespace, lines: StdinLines) -> None:
        self.args = args
        self.lines = lines
        self.outbox: asyncio.Queue[v1.RunStreamRequest | None] = asyncio.Queue()
        self.asking: dict[str, asyncio.Task[None]] = {}
        self.waiting = Progress("thinking…")
        self.run_id = ""

    async def requests(self) -> AsyncIterator[v1.RunStreamRequest]:
        while (item := await self.outbox.get()) is not None:
            yield item

    async def next_input(self) -> None:
        if self.args.message:
            self.outbox.put_nowait(None)
            return
        line = await self.lines.get("\nyou> ")
        if line is None or line.strip() in ("", "/quit", "/exit"):
            self.outbox.put_nowait(None)
            return
        self.outbox.put_nowait(v1.RunStreamRequest(v=1, input=v1.MessageInput(text=line)))
        self.waiting.start()

    async def ask(self, request: v1.ToolApprovalRequest) -> None:
        if self.args.yes:
            answer = "y"
        else:
            question = (f"\n? approve {request.tool_name} (digest {request.args_digest[:12]})"
                        " [y]es once / [s]ession / [n]o: ")
            answer = ""
            while answer not in _ANSWERS:
                line = await self.lines.get(question)
                answer = "n" if line is None else line.strip().lower()[:1]
        decision, scope = _ANSWERS[answer]
        self.outbox.put_nowait(v1.RunStreamRequest(v=1, run_id=self.run_id, approval=v1.InlineApprovalDecision(
            approval_id=request.approval_id, decision=decision, scope=scope)))

    def show(self, event: v1.TapeEvent, tg: asyncio.TaskGroup) -> bool:
        """Render one event; return True when the run ended."""
        self.run_id = event.run_id or self.run_id
        kind, body = betterproto2.which_one_of(event, "event")
        if isinstance(body, v1.ModelToken):
            self.waiting.clear()
            sys.stdout.write(body.token)
            sys.stdout.flush()
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
            if task is not None and not task.done():
                task.cancel()
                print(f"\n  (decided elsewhere by {body.decided_by}: "
                      f"{'approved' if body.approved else 'denied'})", flush=True)
        elif isinstance(body, v1.AgentLoop) and body.phase == v1.AgentLoopPhase.TERMINATED:
            tg.create_task(self.next_input())
        elif isinstance(body, v1.RunStatus) and body.state in _TERMINAL:
            print(f"\n[run {event.run_id} {enum_name(body.state)}"
                  f"{': ' + body.reason if body.reason else ''}]", flush=True)
            return True
        elif kind == "error" and isinstance(body, v1.RunError):
            print(f"\n[error {enum_name(body.code)}: {body.message}]", file=sys.stderr, flush=True)
        return False


async def _chat(args: argparse.Namespace) -> int:
    lines = StdinLines()
    first = args.message or await lines.get("you> ")
    if not first:
        return 0
    chat = _Chat(args, lines)
    chat.outbox.put_nowait(v1.RunStreamRequest(
        v=1, session_key=args.session, input=v1.MessageInput(text=first)))
    chat.waiting.start()
    try:
        async with connect(args) as stubs, asyncio.TaskGroup() as tg:
            ticker = tg.create_task(_tick(chat.waiting))
            try:
                async for response in stubs.gateway.run_stream(chat.requests()):
                    if response.event is not None and chat.show(response.event, tg):
                        break
            finally:
                ticker.cancel()
                for task in chat.asking.values():
                    task.cancel()
                chat.outbox.put_nowait(None)
    except Exception as exc:
        return report_error(exc)
    return 0


async def _tick(progress: Progress) -> None:
    while True:
        await asyncio.sleep(0.2)
        progress.tick()
