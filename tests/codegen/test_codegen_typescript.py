"""The generated TypeScript type-checks under the repo's pinned TypeScript and Node 20."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_tsc_no_emit_passes() -> None:
    tsc = REPO_ROOT / "node_modules" / ".bin" / "tsc"
    assert tsc.exists(), "run `npm ci` first"
    proc = subprocess.run(
        [str(tsc), "--noEmit", "-p", "tsconfig.json"], cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
