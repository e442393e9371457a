"""Configuration of the policy gate."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from palyra.policy._model import Posture

DEFAULT_RUN_TOOL_BUDGET = 64


@dataclasses.dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Where policies come from and the knobs the default policies read.

    Attributes:
        config_dir: Daemon config dir; ``<config_dir>/policies/*.cedar`` are
            loaded after the shipped defaults. ``None``: defaults only.
        include_defaults: Load the shipped default policies. Turning this off
            leaves only configured policies (deny-by-default still holds).
        process_exec_enabled: Lets ``process_exec`` tools (``process.run``) run
            at all; they still need approval. Keep in step with
            ``ToolsConfig.process_exec_enabled``.
        tool_postures: Per-tool posture from config (session overrides win).
        run_tool_budget: Tool calls allowed per run. The tool-loop benchmark
            makes 10-20 per run, hence 64.
    """

    config_dir: Path | None = None
    include_defaults: bool = True
    process_exec_enabled: bool = False
    tool_postures: Mapping[str, Posture] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    run_tool_budget: int = DEFAULT_RUN_TOOL_BUDGET
