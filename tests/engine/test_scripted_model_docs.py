"""docs/scripted-model.md's examples: each message, run for real, ends with the documented
reply (so the page cannot drift from the provider)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from engine_harness import USER, Harness
from palyra_gen.palyra import v1 as pb

DOC = Path(__file__).resolve().parents[2] / "docs" / "scripted-model.md"
_ROW = re.compile(r"^\| `([^`]+)` \| `([^`]+)` \|$", re.MULTILINE)
EXAMPLES = _ROW.findall(DOC.read_text(encoding="utf-8"))


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 4


@pytest.mark.parametrize(("message", "reply"), EXAMPLES)
async def test_a_documented_example(harness: Harness, message: str, reply: str) -> None:
    app = await harness.start()
    made = await app.create_run(USER, pb.CreateRunRequest(
        v=1, session_key="docs", input=pb.MessageInput(text=message), complete=True,
        wait=True))
    assert made.run is not None and made.run.final_text == reply
