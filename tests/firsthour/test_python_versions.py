"""The README's commands on every Python 3.11 it names (issue: Debian's 3.11.2 failed).

Debian 12's ``/usr/bin/python3`` is 3.11.2, older than the 3.11.4 that added
``TarFile.extractall(filter=...)``; pyenv's or python.org's 3.11 is newer. The
fixtures must unpack on both, and ``tools/run_nox.py`` must build the session
venvs with the interpreter that ran it (else "works on Debian's Python" is
never tested), which ``.ci/run`` picks as Debian's when the machine has it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "journal_v1" / "journal-v1.tar.gz"
DEBIAN_PYTHON = Path("/usr/bin/python3")


def _interpreters() -> list[str]:
    found = [sys.executable]
    if DEBIAN_PYTHON.exists():
        found.append(str(DEBIAN_PYTHON))
    return found


def _unpack_with(python: str, archive: Path, dest: Path) -> subprocess.CompletedProcess[str]:
    # The helper needs only the standard library, so a bare interpreter can run it.
    code = ("import sys; from palyra.testing.archives import extract_tar; "
            "extract_tar(__import__('pathlib').Path(sys.argv[1]), "
            "__import__('pathlib').Path(sys.argv[2]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([python, "-S", "-c", code, str(archive), str(dest)], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("python", _interpreters())
def test_the_journal_fixture_unpacks(python: str, tmp_path: Path) -> None:
    done = _unpack_with(python, FIXTURE, tmp_path / "data")
    assert done.returncode == 0, done.stderr
    with tarfile.open(FIXTURE) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    assert names and all((tmp_path / "data" / name).is_file() for name in names)


@pytest.mark.parametrize("python", _interpreters())
def test_a_member_outside_the_destination_is_refused(python: str, tmp_path: Path) -> None:
    evil = tmp_path / "evil.tar"
    payload = tmp_path / "payload"
    payload.write_text("x")
    with tarfile.open(evil, "w") as tar:
        tar.add(payload, arcname="../escaped")
    done = _unpack_with(python, evil, tmp_path / "out" / "data")
    assert done.returncode != 0 and "UnsafeArchiveError" in done.stderr
    assert not (tmp_path / "out" / "escaped").exists()


@pytest.mark.slow
@pytest.mark.parametrize("python", _interpreters())
def test_session_venvs_use_the_interpreter_that_ran_run_nox(python: str) -> None:
    want = subprocess.run([python, "-c", "import platform, sys; "
                           "print(platform.python_version(), sys.base_prefix)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run([python, "tools/run_nox.py", "-s", "interpreter"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert want in done.stdout.splitlines(), (want, done.stdout, done.stderr)


def test_ci_runs_the_readme_command_under_debians_python() -> None:
    # `.ci/run -l` goes through the same interpreter choice and run_nox.py,
    # which names the Python the session venvs get; `-l` only lists sessions.
    done = subprocess.run([str(ROOT / ".ci" / "run"), "-l"], capture_output=True, text=True,
                          timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    expected = DEBIAN_PYTHON if DEBIAN_PYTHON.exists() else None
    line = next(x for x in done.stderr.splitlines() if "session venvs use Python" in x)
    if expected is not None:
        assert f"({expected})" in line, line
    assert "tests" in done.stdout
