#!/usr/bin/env python3
"""Run the project's nox sessions from a project-local venv: ``python3 tools/run_nox.py -s tests``.

Works as written with any Python 3.11+: Debian's own ``/usr/bin/python3``
(which refuses ``pip install`` outside a venv, PEP 668), pyenv or python.org.
It installs nothing into the user's global or user site: nox lives in
``.nox/_bootstrap`` (next to the session venvs, ignored by git), created once
and reused while the pinned version is unchanged. Every argument is passed to
nox unchanged.

The session venvs are built with the interpreter that ran this script (not
whichever ``python3.11`` comes first on PATH), so ``/usr/bin/python3
tools/run_nox.py -s tests`` tests on Debian's Python; a session venv made by
another interpreter is rebuilt (nox's staleness check compares base prefixes).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
import sys
import venv
from pathlib import Path

NOX = "nox==2026.10.20"
# Read by noxfile.py: the interpreter every session venv is built with.
SESSION_PYTHON_ENV = "PALYRA_SESSION_PYTHON"
ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / ".nox" / "_bootstrap"
STAMP = HOME / "palyra-bootstrap.txt"


def _python() -> Path:
    return HOME / "bin" / "python"


def _ready() -> bool:
    return _python().exists() and STAMP.exists() and STAMP.read_text() == NOX


def _create() -> None:
    if importlib.util.find_spec("ensurepip") is None:
        sys.exit("tools/run_nox.py: this Python has no venv support (ensurepip); on Debian "
                 "or Ubuntu install it with `apt-get install python3-venv`, then run again.")
    print(f"tools/run_nox.py: creating {HOME.relative_to(ROOT)} with {NOX}", file=sys.stderr)
    venv.EnvBuilder(with_pip=True, clear=True).create(HOME)
    subprocess.run([str(_python()), "-m", "pip", "install", "--quiet",
                    "--disable-pip-version-check", NOX], check=True)
    STAMP.write_text(NOX)


def main() -> None:
    if sys.version_info < (3, 11):  # noqa: UP036 - a clear message on an older python3
        sys.exit("tools/run_nox.py needs Python 3.11 or newer")
    if not _ready():
        _create()
    os.chdir(ROOT)
    os.environ[SESSION_PYTHON_ENV] = sys.executable
    os.environ["NOX_ENABLE_STALENESS_CHECK"] = "1"
    print(f"tools/run_nox.py: session venvs use Python {platform.python_version()} "
          f"({sys.executable})", file=sys.stderr, flush=True)
    os.execv(_python(), [str(_python()), "-m", "nox", *sys.argv[1:]])


if __name__ == "__main__":
    main()
