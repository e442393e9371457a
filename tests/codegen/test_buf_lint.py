"""The proto spec passes `buf lint` (STANDARD rules, third_party ignored)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _buf() -> str:
    # buf-bin installs `buf` beside the interpreter of the environment running the tests.
    local = Path(sys.executable).parent / "buf"
    found = str(local) if local.exists() else shutil.which("buf")
    assert found, "buf (PyPI buf-bin) must be installed with the codegen extra"
    return found


def test_buf_lint_passes() -> None:
    proc = subprocess.run(
        [_buf(), "lint"], cwd=ROOT / "spec", capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_buf_lint_reports_a_bad_name(tmp_path: Path) -> None:
    # The check must be able to fail: a request type that breaks STANDARD naming.
    spec = tmp_path / "spec"
    shutil.copytree(ROOT / "spec", spec)
    bad = spec / "proto" / "palyra" / "v1" / "memory.proto"
    bad.write_text(bad.read_text().replace("message MemoryHit {", "message memory_hit {"))
    bad.write_text(bad.read_text().replace("repeated MemoryHit hits", "repeated memory_hit hits"))
    proc = subprocess.run([_buf(), "lint"], cwd=spec, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "memory_hit" in proc.stdout + proc.stderr
