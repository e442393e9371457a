"""Human rendering of tape events, sessions and approvals for the terminal."""

from __future__ import annotations

import sys
import time
from typing import TextIO

import betterproto2
from palyra_gen.palyra import v1


def enum_name(value: object) -> str:
    """``RunState.WAITING_FOR_APPROVAL`` → ``waiting_for_approval``."""
    name = getattr(value, "name", str(value))
    return str(name).lower()


def describe(event: v1.TapeEvent) -> tuple[str, str]:
    """``(kind, one-line text)`` of a tape event."""
    kind, body = betterproto2.which_one_of(event, "event")
    if isinstance(body, v1.RunStatus):
        text = f"state={enum_name(body.state)}" + (f" ({body.reason})" if body.reason else "")
    elif isinstance(body, v1.ModelToken):
        text = repr(body.token)
    elif isinstance(body, v1.ToolProposal):
        text = f"{body.tool_name}({body.input_json})" + (" needs approval" if body.approval_required else "")
    elif isinstance(body, v1.ToolDecision):
        text = f"{enum_name(body.outcome)}: {body.reason}"
    elif isinstance(body, v1.ToolApprovalRequest):
        text = f"approval {body.approval_id} for {body.tool_name}: {body.prompt.summary if body.prompt else ''}"
    elif isinstance(body, v1.ToolApprovalResponse):
        text = f"{'approved' if body.approved else 'denied'} by {body.decided_by or '?'} ({enum_name(body.scope)})"
    elif isinstance(body, v1.ToolResult):
        text = f"{body.tool_name} -> {body.output_json if body.success else 'error: ' + body.error}"
    elif isinstance(body, v1.MessageReplied):
        text = body.reply_text
    elif isinstance(body, v1.UserInput):
        text = repr(body.text)
    elif isinstance(body, v1.AgentLoop):
        text = f"{enum_name(body.phase)} turn={body.turn}" + (f" {body.reason}" if body.reason else "")
    elif isinstance(body, v1.RunError):
        text = f"{enum_name(body.code)}: {body.message}"
    elif body is None:
        text = ""
    else:
        text = str(body.to_dict())
    return kind or "?", text


def print_event(event: v1.TapeEvent, out: TextIO = sys.stdout) -> None:
    """One line per tape event: ``seq kind text``."""
    kind, text = describe(event)
    print(f"{event.tape_seq:>5} {kind:<22} {text}", file=out, flush=True)


def format_ms(unix_ms: int) -> str:
    """Local wall time of a unix-ms timestamp (``-`` when unset)."""
    if not unix_ms:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(unix_ms / 1000))


def print_table(rows: list[list[str]], header: list[str], out: TextIO = sys.stdout) -> None:
    """A plain aligned table."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)).rstrip(),
              file=out)


class Progress:
    """A one-line ``waiting…`` indicator on stderr for long operations (TTY only)."""

    def __init__(self, label: str, out: TextIO = sys.stderr) -> None:
        self._label = label
        self._out = out
        self._started = time.monotonic()
        self._shown = False
        self._active = False

    def start(self) -> None:
        """Begin a wait (restarts the clock)."""
        self._started = time.monotonic()
        self._active = True

    def tick(self) -> None:
        """Redraw with the elapsed time, while a wait is active."""
        if not self._active or not self._out.isatty():
            return
        elapsed = time.monotonic() - self._started
        self._out.write(f"\r{self._label} {elapsed:5.1f}s")
        self._out.flush()
        self._shown = True

    def clear(self) -> None:
        """End the wait and erase the indicator before normal output."""
        self._active = False
        if self._shown:
            self._out.write("\r\033[K")
            self._out.flush()
            self._shown = False
