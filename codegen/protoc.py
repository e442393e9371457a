"""Running grpcio-tools' protoc (pinned in pyproject) with the spec's include roots."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from codegen.diagnostics import ToolError
from codegen.layout import SpecLayout, protoc_include


def include_args(layout: SpecLayout) -> list[str]:
    """``-I`` flags: palyra's protos, vendored third-party protos, protoc's WKTs."""
    return [
        f"-I{layout.proto_dir}",
        f"-I{layout.third_party_dir}",
        f"-I{protoc_include()}",
    ]


def protoc_command(layout: SpecLayout, args: Sequence[str]) -> list[str]:
    """The full protoc command line (a subprocess, so plugin chatter can be captured)."""
    return [sys.executable, "-m", "grpc_tools.protoc", *include_args(layout), *args]


def tool_env() -> dict[str, str]:
    """Environment for protoc and its plugins: this venv's scripts first on PATH.

    betterproto2-compiler shells out to ``ruff`` by bare name; the pinned ruff of
    this venv must win over any other on PATH, or output would vary by machine.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_protoc(layout: SpecLayout, args: Sequence[str], *, what: str, cwd: Path) -> None:
    """Run protoc in ``cwd`` and raise ``ToolError`` with its stderr on failure.

    ``cwd`` should be a directory outside any project: plugins that run ruff would
    otherwise pick up the nearest pyproject.toml and format differently per caller.
    """
    proc = subprocess.run(
        protoc_command(layout, args), capture_output=True, text=True, env=tool_env(), cwd=cwd
    )
    check_result(proc, what)


def check_result(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """Turn a failed protoc run into a ``ToolError`` that shows protoc's own message."""
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise ToolError(f"protoc failed while {what} (exit {proc.returncode}):\n{detail}")
