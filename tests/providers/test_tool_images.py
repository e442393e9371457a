"""A tool's images reach the model in each vendor's own shape: inside Anthropic's
``tool_result``, and for OpenAI (whose tool messages are text only) as one user message
of image parts right after the turn's tool messages."""

from __future__ import annotations

import base64

from palyra.providers import ChatMessage, ImagePart, ToolCall
from palyra.providers._anthropic import messages_to_anthropic
from palyra.providers._openai import messages_to_openai

PNG = ImagePart("ab" * 32, "image/png", 3, 2, data=b"\x89PNG-bytes")
URL = "data:image/png;base64," + base64.b64encode(PNG.data).decode()

TURN = [
    ChatMessage(role="user", content="look"),
    ChatMessage(role="assistant", tool_calls=[ToolCall("c1", "mcp.x.photo", {}),
                                              ToolCall("c2", "add", {"a": 1, "b": 2})]),
    ChatMessage(role="tool", content='{"content": []}', tool_call_id="c1", images=[PNG]),
    ChatMessage(role="tool", content='{"result": 3}', tool_call_id="c2"),
    ChatMessage(role="user", content="and now?"),
]


def test_openai_gets_the_images_after_the_turns_tool_messages() -> None:
    out = messages_to_openai(TURN)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user", "user"]
    assert out[2] == {"role": "tool", "tool_call_id": "c1", "content": '{"content": []}'}
    assert out[4]["content"] == [
        {"type": "text", "text": "images returned by tool call c1:"},
        {"type": "image_url", "image_url": {"url": URL}}]
    assert out[5] == {"role": "user", "content": "and now?"}
    # Without images nothing is added.
    assert len(messages_to_openai([*TURN[:2], TURN[3]])) == 3


def test_anthropic_gets_them_inside_the_tool_result() -> None:
    _system, out = messages_to_anthropic(TURN)
    results = [b for m in out for b in m["content"] if b["type"] == "tool_result"]
    assert results[0]["content"] == [
        {"type": "text", "text": '{"content": []}'},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(PNG.data).decode()}}]
    assert results[1]["content"] == '{"result": 3}'
