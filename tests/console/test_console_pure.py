"""The console's pure TypeScript (SSE parser, bounded tape window, transcript fold)
under Node's own test runner, through the pinned tsx."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_console_pure_modules_under_node() -> None:
    node = shutil.which("node")
    assert node, "Node 20 is needed (see the README's set-up)"
    done = subprocess.run([node, "--import", "tsx", "--test", "console/test/pure.test.ts"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "# fail 0" in done.stdout and "# pass 3" in done.stdout
