"""Pruning the provider input to the model's token budget (pure).

The engine has no tokenizer of the model it calls, so it *estimates* plainly:
one token per 3 characters of a message's text and arguments, plus 4 per
message (an over-estimate for English, so the budget errs on the safe side);
the ``context_stage`` event names this estimate. Pruning keeps every system
block and the current turn (the last user message and all after it), and drops
the oldest *units* first: a user message, or an assistant message together with
the tool results that answer it, so no tool result is ever left without its call.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from palyra.providers import ChatMessage

_json = msgspec.json.Encoder()

ESTIMATE = "estimate: 1 token per 3 characters + 4 per message (no model tokenizer here)"


def estimate_tokens(message: ChatMessage) -> int:
    """The estimated tokens of one message."""
    size = len(message.content)
    for call in message.tool_calls:
        size += len(call.name) + len(_json.encode(call.arguments))
    return size // 3 + 4


def prune(messages: Sequence[ChatMessage], budget: int,
          sizes: Sequence[int] | None = None) -> tuple[list[ChatMessage], int, int]:
    """``(kept, dropped messages, dropped tokens)`` so the kept ones fit ``budget`` if the
    system blocks and the current turn allow it (those are never dropped).

    ``sizes``: ``estimate_tokens`` of each message, when the caller keeps them (the
    loop estimates a message once, as it folds it, not on every turn again).
    """
    if sizes is None or len(sizes) != len(messages):
        sizes = [estimate_tokens(m) for m in messages]
    total = sum(sizes)
    if budget <= 0 or total <= budget:
        return list(messages), 0, 0
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=len(messages))
    units: list[list[int]] = []  # indexes of droppable history, oldest first
    for i, m in enumerate(messages[:last_user]):
        if m.role == "system":
            continue
        if m.role == "tool" and units and messages[units[-1][0]].role == "assistant":
            units[-1].append(i)
        else:
            units.append([i])
    dropped: set[int] = set()
    saved = 0
    for unit in units:
        if total - saved <= budget:
            break
        dropped.update(unit)
        saved += sum(sizes[i] for i in unit)
    kept = [m for i, m in enumerate(messages) if i not in dropped]
    return kept, len(dropped), saved
