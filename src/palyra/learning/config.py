"""Post-run reflection settings (``[learning]`` in TOML, ``PALYRA_LEARNING_*`` in the env)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class LearningConfig:
    """When a finished run is reflected on.

    Attributes:
        enabled: Queue a ``post_run_reflection`` task when a run ends ``done``.
        sampling_percent: Reflect on this share of runs (chosen by the run id's
            SHA-256, so the same run always gets the same answer).
        cooldown_s: At most one reflection per session per window of this length.
    """

    enabled: bool = True
    sampling_percent: int = 100
    cooldown_s: float = 300.0
