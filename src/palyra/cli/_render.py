"""Human rendering of tape events, sessions and approvals for the terminal."""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

import betterproto2
from palyra_gen.palyra import v1

from palyra.core.protojson import encode_message


def enum_name(value: object) -> str:
    """``RunState.WAITING_FOR_APPROVAL`` → ``waiting_for_approval``."""
    name = getattr(value, "name", str(value))
    return str(name).lower()


def _text(value: str) -> str:
    """A free-text field as a JSON string: quoted, newlines and controls escaped."""
    return json.dumps(value, ensure_ascii=False)


def _json(value: str) -> str:
    """A JSON-carrying field compacted to one line (kept as a quoted string if not JSON)."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return _text(value)
    return json.dumps(parsed, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _fields(*parts: tuple[str, object]) -> str:
    """``key=value`` for each part that is set (empty strings, 0, False and None are left out)."""
    return " ".join(f"{key}={value}" for key, value in parts if value not in ("", 0, False, None))


def _join(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def _decision(body: v1.ToolDecision) -> str:
    return _join(enum_name(body.outcome), _text(body.reason) if body.reason else "",
                 _fields(("approval", body.approval_id), ("policy", body.policy_hash[:12]),
                         ("policies", ",".join(body.policy_ids))))


def _describe_body(body: betterproto2.Message) -> str:
    if isinstance(body, v1.RunStatus):
        return _join(f"state={enum_name(body.state)}",
                     _fields(("reason", body.reason), ("event", body.event)),
                     _text(body.message) if body.message else "")
    if isinstance(body, v1.ModelToken):
        return _join(_text(body.token), _fields(("turn", body.turn)), "final" if body.is_final else "")
    if isinstance(body, v1.ToolProposal):
        return _join(f"{body.tool_name} {_json(body.input_json or '{}')}",
                     _fields(("turn", body.turn), ("proposal", body.proposal_id),
                             ("for", body.context_reference)),
                     "needs approval" if body.approval_required else "",
                     f"-> {_decision(body.decision)}" if body.decision else "")
    if isinstance(body, v1.ToolDecision):
        return _join(_decision(body), _fields(("proposal", body.proposal_id)))
    if isinstance(body, v1.ToolApprovalRequest):
        summary = body.prompt.summary if body.prompt else ""
        return _join(f"approval {body.approval_id} for {body.tool_name}",
                     _text(summary) if summary else "",
                     _fields(("risk", enum_name(body.prompt.risk_level) if body.prompt else ""),
                             ("digest", body.args_digest[:12]),
                             ("expires", format_ms(body.expires_at_unix_ms).replace(" ", "T")
                              if body.expires_at_unix_ms else "")))
    if isinstance(body, v1.ToolApprovalResponse):
        return _join(f"{'approved' if body.approved else 'denied'} by {body.decided_by or '?'}",
                     _fields(("scope", enum_name(body.scope)), ("ttl_s", body.ttl_seconds),
                             ("state", enum_name(body.state)), ("approval", body.approval_id)),
                     "from cache" if body.from_cache else "",
                     _text(body.reason) if body.reason else "")
    if isinstance(body, v1.ToolResult):
        outcome = _json(body.output_json or "null") if body.success else f"error {_text(body.error)}"
        attested = body.attestation
        return _join(f"{body.tool_name} -> {outcome}",
                     "timed out" if body.timed_out else "", "truncated" if body.truncated else "",
                     _fields(("executor", attested.executor),
                             ("sha256", attested.execution_sha256)) if attested else "")
    if isinstance(body, v1.ToolAttestation):
        return _join(_fields(("proposal", body.proposal_id), ("executor", body.executor),
                             ("sha256", body.execution_sha256)),
                     "timed out" if body.timed_out else "")
    if isinstance(body, v1.MessageReplied):
        return _text(body.reply_text)
    if isinstance(body, v1.UserInput):
        return _join(_text(body.text), _fields(("attachments", body.attachment_count),
                                                ("input", body.input_id)))
    if isinstance(body, v1.AgentLoop):
        return _join(enum_name(body.phase), _fields(("turn", body.turn), ("reason", body.reason)))
    if isinstance(body, v1.ProviderTurnOutput):
        return _join(_fields(("turn", body.turn), ("provider", body.provider),
                             ("finish", body.finish_reason), ("tool_calls", body.tool_call_count),
                             ("tokens_in", body.input_tokens), ("tokens_out", body.output_tokens)),
                     _text(body.text) if body.text else "")
    if isinstance(body, v1.ToolCatalogSnapshot):
        return _join(json.dumps(list(body.tool_names), separators=(",", ":")),
                     _fields(("hash", body.catalog_hash[:12])))
    if isinstance(body, v1.ContextStage):
        items = ",".join(f"{i}:{b}" for i, b in zip(body.item_ids, body.scores_bps, strict=False))
        return _join(body.stage, _fields(("tokens", body.tokens), ("items", items)),
                     _text(body.reason) if body.reason else "")
    if isinstance(body, v1.SessionCompaction):
        return _join(body.strategy, _fields(
            ("seqs", f"{body.first_seq}..{body.last_seq}"), ("pinned", len(body.pinned_seqs)),
            ("tokens", f"{body.tokens_before}->{body.tokens_after}"),
            ("model", body.summariser_model), ("digest", body.digest_sha256[:12])),
            _text(body.summary) if body.summary else "")
    if isinstance(body, v1.RunError):
        return f"{enum_name(body.code)}: {' '.join(body.message.splitlines())}"
    # A member added to the spec after this renderer: its proto3 JSON, on one line.
    return json.dumps(encode_message(body), ensure_ascii=False, separators=(",", ":"),
                      sort_keys=True)


def describe(event: v1.TapeEvent) -> tuple[str, str]:
    """``(kind, one-line text)`` of a tape event.

    Free text is a JSON string (quoted, newlines escaped); JSON payloads (tool
    input/output) are compact JSON; the rest is ``key=value``.
    """
    kind, body = betterproto2.which_one_of(event, "event")
    text = "" if body is None else _describe_body(body)
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
