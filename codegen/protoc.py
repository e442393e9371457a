"""Running grpcio-tools' protoc (pinned in pyproject) with the spec's include roots."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

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


def run_protoc(layout: SpecLayout, args: Sequence[str], *, what: str) -> None:
    """Run protoc and raise ``ToolError`` with its stderr on failure."""
    check_result(subprocess.run(protoc_command(layout, args), capture_output=True, text=True), what)


def check_result(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """Turn a failed protoc run into a ``ToolError`` that shows protoc's own message."""
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip()
        raise ToolError(f"protoc failed while {what} (exit {proc.returncode}):\n{detail}")
