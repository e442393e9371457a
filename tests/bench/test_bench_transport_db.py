"""``bench tool-loop --transport grpc --db DIR`` creates DIR like the in-process mode does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from palyra.testing.spawn import clean_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_grpc_bench_creates_a_missing_db_dir(tmp_path: Path) -> None:
    db = tmp_path / "not" / "there" / "yet"
    env = {**clean_env(),
           "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    run = subprocess.run(
        [sys.executable, "-m", "bench", "tool-loop", "--transport", "grpc", "--db", str(db),
         "--sessions", "2", "--steps", "1", "--concurrency", "1", "--repeats", "1",
         "--json", str(tmp_path / "result.json")],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    assert db.is_dir() and any(db.iterdir())
    assert json.loads((tmp_path / "result.json").read_text())
