"""``generated/docs/<lifecycle>.mmd``: a Mermaid ``stateDiagram-v2`` per lifecycle."""

from __future__ import annotations

from codegen.lifecycle_model import Lifecycle

GENERATOR = "codegen/render_mermaid.py"


def render(lc: Lifecycle) -> str:
    """Diagram text (the banner is added by the pipeline): initial, transitions, finals."""
    lines = ["stateDiagram-v2", f"    [*] --> {lc.initial[0]}"]
    lines += [f"    {t.source} --> {t.target} : {t.event}" for t in lc.transitions]
    lines += [f"    {s} --> [*]" for s in lc.finals]
    return "\n".join(lines) + "\n"
