"""The scripted provider: deterministic, keyless, the default.

It implements the tool-loop workload rule (below; ``docs/bench.md`` runs it)
exactly, and echoes any other user message back, word by word:

* Look at the messages after the last ``user`` message. ``n`` is the number of
  ``tool`` messages there, ``r`` the value of the latest one that is not an
  error (0 if none): a denied or failed call (``{"error": ...}``) counts as a
  step but does not reset the running total.
* ``K`` comes from the user message itself: the number in ``"... add 1 to the
  running total K times ..."`` (regex ``(\\d+)\\s+times``).
* If ``n < K``: empty text and one tool call ``add {"a": r, "b": 1}`` (or, with
  ``tool="echo"``, ``echo {"text": str(r + 1)}``) with id ``call_{n}``.
* Otherwise the text ``result={r}``.

A user message ``/call TOOL {json args}`` asks for that one call instead
(``_directive.py``), and the reply after its result is the result's content.

It is stateless: the answer is a pure function of the request, so a run that
is resumed from the journal gets exactly the answer it would have got.
"""

from __future__ import annotations

import asyncio
import operator
import re
from collections.abc import AsyncGenerator
from typing import Any

import msgspec

from palyra.providers._config import ScriptedTool
from palyra.providers._directive import BadDirective, is_directive, parse_directives
from palyra.providers._types import (
    ChatMessage,
    Completed,
    ModelRequest,
    ModelResponse,
    ProviderChunk,
    TextDelta,
    ToolCall,
    Usage,
    collect_response,
)

_TIMES = re.compile(r"(\d+)\s+times")
# Post-run reflection asks with a system prompt starting with this marker
# (palyra.learning.model.REFLECTION_MARKER; a test holds the two equal).
REFLECTION_MARKER = "palyra.reflection.v1"
# Compaction asks with a system prompt starting with this marker
# (palyra.engine.model.compaction.SUMMARY_MARKER; a test holds the two equal).
SUMMARY_MARKER = "palyra.compaction.v1"
_TRANSCRIPT_LINE = re.compile(r"^\[seq (\d+)\] (\w+): ?(.*)$", re.MULTILINE)
_SUMMARY_LINES = 8
_SUMMARY_LINE_CHARS = 48
_SEQ_LINE = re.compile(r"^\[seq (\d+)\] user: (.*)$", re.MULTILINE)
_REMEMBER = re.compile(r"\bremember that ([^.!?]+)", re.IGNORECASE)
_PREFER = re.compile(r"\bI prefer ([^.!?]+)", re.IGNORECASE)
_WORD = re.compile(r"\S+\s*|\s+")

Number = int | float


def parse_tool_value(content: str) -> Number:
    """Read the numeric value out of a tool result's content.

    Accepted shapes, so that both built-in tools round-trip: a bare JSON number,
    ``{"result": x}`` (the ``add`` tool), ``{"text": "x"}`` (the ``echo`` tool),
    or a JSON string / plain text holding a number. Anything else reads as 0,
    which makes the final ``result=`` visibly wrong rather than crashing.
    """
    try:
        value: Any = msgspec.json.decode(content)
    except msgspec.DecodeError:
        value = content
    if isinstance(value, dict):
        value = value.get("result", value.get("text", 0))
    if isinstance(value, bool):  # bool is an int subclass; never a tool count
        return 0
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            try:
                return float(value.strip())
            except ValueError:
                return 0
    return 0


def _value_of(content: str) -> Number | None:
    """A tool message's value, or None for an error result (a denial, a failed tool)."""
    try:
        decoded: Any = msgspec.json.decode(content)
    except msgspec.DecodeError:
        decoded = None
    if isinstance(decoded, dict) and "error" in decoded:
        return None
    return parse_tool_value(content)


def _fmt(value: Number) -> str:
    # add keeps ints as ints; a float that is integral prints like an int so
    # that echo's "10" and add's 10 give the same "result=10".
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _word_count(messages: list[ChatMessage]) -> int:
    # Every message on every call: mapped in C, no generator frame per message.
    return sum(map(len, map(str.split, map(_CONTENT, messages))))


_CONTENT = operator.attrgetter("content")


def scripted_reply(request: ModelRequest, *, tool: ScriptedTool = "add") -> ModelResponse:
    """Compute the scripted model's answer to ``request`` (pure).

    Args:
        request: The model request; only ``messages`` are read.
        tool: ``add`` or ``echo``: which tool the tool-loop script calls.

    Returns:
        The response the scripted provider streams.
    """
    messages = request.messages
    if messages and messages[0].role == "system" and messages[0].content.startswith(
            REFLECTION_MARKER):
        return scripted_reflection(messages[-1].content)
    if messages and messages[0].role == "system" and messages[0].content.startswith(
            SUMMARY_MARKER):
        return scripted_summary(messages[-1].content)
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=-1)
    usage_in = _word_count(messages)
    user_text = messages[last_user].content if last_user >= 0 else ""
    images = messages[last_user].images if last_user >= 0 else []
    if images:
        # Vision, deterministically: each image by type, pixel size and digest.
        described = "; ".join(f"image {n}: {image.describe()}"
                              for n, image in enumerate(images, 1))
        text = f"{user_text}\n{described}" if user_text else described
        return ModelResponse(text=text, tool_calls=[], finish_reason="stop",
                             usage=Usage(usage_in, len(text.split())), model="scripted")
    if is_directive(user_text):
        return _directive_reply(user_text, messages[last_user + 1:], usage_in)
    match = _TIMES.search(user_text)
    if match is None:
        # Echo mode, like the reference's deterministic provider.
        return ModelResponse(
            text=user_text,
            tool_calls=[],
            finish_reason="stop",
            usage=Usage(usage_in, len(user_text.split())),
            model="scripted",
        )
    k = int(match.group(1))
    tool_results = [m for m in messages[last_user + 1 :] if m.role == "tool"]
    n = len(tool_results)
    # The last result that is not an error (0 when none): read from the end, so a call
    # parses the one result it needs, not every result of the loop again.
    r: Number = next((v for m in reversed(tool_results)
                      if (v := _value_of(m.content)) is not None), 0)
    if n < k:
        arguments: dict[str, Any] = ({"text": _fmt(r + 1)} if tool == "echo" else
                                     {"a": r, "b": 1})
        call = ToolCall(id=f"call_{n}", name=tool, arguments=arguments)
        return ModelResponse(
            text="",
            tool_calls=[call],
            finish_reason="tool_calls",
            usage=Usage(usage_in, 1),
            model="scripted",
        )
    text = f"result={_fmt(r)}"
    return ModelResponse(
        text=text, tool_calls=[], finish_reason="stop", usage=Usage(usage_in, 1), model="scripted"
    )


def _directive_reply(user_text: str, after: list[ChatMessage], usage_in: int) -> ModelResponse:
    """``/call``: ask for the calls once; after their results, reply with their contents."""
    results = [m for m in after if m.role == "tool"]
    if results:
        # A result's images (an MCP tool's), described as a user's are.
        text = "\n".join(m.content + "".join(f"\nimage: {i.describe()}" for i in m.images)
                         for m in results)
    else:
        directives = parse_directives(user_text)
        if isinstance(directives, BadDirective):
            text = directives.problem
        else:
            calls = [ToolCall(id=f"call_{i}", name=d.tool, arguments=d.arguments)
                     for i, d in enumerate(directives)]
            return ModelResponse(text="", tool_calls=calls, finish_reason="tool_calls",
                                 usage=Usage(usage_in, len(calls)), model="scripted")
    return ModelResponse(text=text, tool_calls=[], finish_reason="stop",
                         usage=Usage(usage_in, len(text.split())), model="scripted")


def scripted_summary(transcript: str) -> ModelResponse:
    """The scripted model's compaction summary (pure): a count line, then the first
    ``_SUMMARY_LINES - 1`` transcript lines, each cut to ``_SUMMARY_LINE_CHARS``."""
    found = _TRANSCRIPT_LINE.findall(transcript)
    seqs = [int(seq) for seq, _, _ in found]
    head = (f"{len(found)} messages, seqs {min(seqs)}..{max(seqs)}." if found
            else "nothing to summarise.")
    lines = [head]
    for seq, role, text in found[: _SUMMARY_LINES - 1]:
        lines.append(f"- {seq} {role}: {text[:_SUMMARY_LINE_CHARS]}")
    body = "\n".join(lines)
    return ModelResponse(text=body, tool_calls=[], finish_reason="stop",
                         usage=Usage(len(transcript.split()), len(body.split())),
                         model="scripted")


def scripted_reflection(transcript: str) -> ModelResponse:
    """The scripted model's reflection (pure): in the user's lines, "remember that X"
    is a durable fact at 9200 bps, "I prefer X" a preference at 8200 bps, each
    pointing at the line's tape seq."""
    candidates: list[dict[str, Any]] = []
    for seq, text in _SEQ_LINE.findall(transcript):
        for match in _REMEMBER.finditer(text):
            candidates.append({"kind": "durable_fact", "text": match.group(1).strip(),
                               "confidence_bps": 9200, "tape_seqs": [int(seq)]})
        for match in _PREFER.finditer(text):
            candidates.append({"kind": "preference",
                               "text": f"prefers {match.group(1).strip()}",
                               "confidence_bps": 8200, "tape_seqs": [int(seq)]})
    body = msgspec.json.encode({"candidates": candidates}).decode()
    return ModelResponse(text=body, tool_calls=[], finish_reason="stop",
                         usage=Usage(len(transcript.split()), len(body.split())),
                         model="scripted")


class ScriptedProvider:
    """Deterministic provider implementing the tool-loop rule and echo mode.

    Args:
        tool: ``add`` (default) or ``echo``: the tool the workload script calls.
        delay_s: Seconds to sleep before answering (default 0), so tests can
            cancel a call while it is in flight.
    """

    def __init__(self, *, tool: ScriptedTool = "add", delay_s: float = 0.0) -> None:
        self._tool: ScriptedTool = tool
        self._delay_s = delay_s

    @property
    def name(self) -> str:
        """Always ``scripted``."""
        return "scripted"

    async def stream(self, request: ModelRequest) -> AsyncGenerator[ProviderChunk, None]:
        """Yield the scripted answer: text as word deltas, then ``Completed``."""
        if self._delay_s > 0:
            await asyncio.sleep(self._delay_s)
        response = scripted_reply(request, tool=self._tool)
        # Words keep their trailing whitespace so the deltas concatenate back
        # to exactly ``response.text``.
        for piece in _WORD.findall(response.text):
            yield TextDelta(piece)
        yield Completed(response)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the scripted answer without streaming."""
        return await collect_response(self.stream(request))

    async def aclose(self) -> None:
        """Nothing to release."""
