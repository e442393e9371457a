"""Settings that are each valid but contradict one another.

Plain functions over a built :class:`PalyraConfig`, so ``palyra serve`` (via
``validate``) and diagnostics (``palyra doctor``) ask the same question.
"""

from __future__ import annotations

import dataclasses

from palyra.config._model import PalyraConfig


@dataclasses.dataclass(frozen=True, slots=True)
class Contradiction:
    """Two settings that cannot both hold; ``setting`` is the one to change."""

    setting: str
    problem: str


def contradictions(config: PalyraConfig) -> list[Contradiction]:
    """Every pair of settings that defeats one of them, in a stable order."""
    found: list[Contradiction] = []
    watchdog, engine = config.watchdog, config.engine
    if watchdog.mode != "disabled" and watchdog.approval_pending_s >= engine.approval_timeout_s:
        found.append(Contradiction(
            "watchdog.approval_pending_s",
            f"{watchdog.approval_pending_s:g} s is not shorter than engine.approval_timeout_s "
            f"({engine.approval_timeout_s:g} s): approvals time out before the watchdog "
            "would report them, so its approval incident never fires"))
    return found
