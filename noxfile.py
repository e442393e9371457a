"""Task runner. CI calls only `python3 tools/run_nox.py -s tests` (see .ci/run and the README)."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests"]

# The interpreter that ran tools/run_nox.py (the README's command), so the
# suite runs on the Python the user has; plain `nox` falls back to python3.11.
PYTHON = os.environ.get("PALYRA_SESSION_PYTHON") or "3.11"
LINT_PATHS = ("src", "tests", "codegen", "bench", "tools", "noxfile.py")


class _QuietUvProbe(logging.Filter):
    # nox probes for uv before every session and logs "uv binary not found." at
    # info level; this project uses the venv backend on purpose, so the line
    # is noise on every run.
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "uv binary not found."


logging.getLogger("nox").addFilter(_QuietUvProbe())


def _install(session: nox.Session, *extras: str) -> None:
    """``pip install -e .[extras]``, skipped when the venv already has this exact set.

    The install is editable, so source changes need no reinstall; only a
    changed pyproject.toml (dependencies, pins, extras) does. The stamp holds
    its hash, so `nox -s serve` starts in about the daemon's own start-up time
    after the first run.
    """
    spec = f".[{','.join(extras)}]" if extras else "."
    digest = hashlib.sha256(Path("pyproject.toml").read_bytes() + spec.encode()).hexdigest()
    location = getattr(session.virtualenv, "location", None)
    stamp = Path(location) / "palyra-install.sha256" if location else None
    if stamp is not None and stamp.exists() and stamp.read_text() == digest:
        session.log(f"dependencies unchanged ({spec}); skipping the install")
        return
    session.install("-e", spec)
    if stamp is not None:
        stamp.write_text(digest)


def _npm_ci(session: nox.Session) -> None:
    # The TypeScript client's toolchain (protoc-gen-es, tsc, connect-node) is
    # pinned in package-lock.json; `npm ci` installs exactly that.
    if not os.path.isdir("node_modules") or os.environ.get("CI"):
        session.run("npm", "ci", "--no-audit", "--no-fund", external=True)


@nox.session(python=PYTHON)
def serve(session: nox.Session) -> None:
    """Run the daemon on its embedded defaults (scripted model, LMDB in ./palyra-data)."""
    _install(session)
    session.run("palyra", "serve", *session.posargs)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """Gates, then the whole suite: codegen drift, ruff, mypy --strict (src/ and
    generated/python), then every test including the TypeScript client."""
    _install(session, "codegen", "test", "dev")
    _npm_ci(session)
    # Debian packages some tests drive for real (tools/system-packages.txt).
    session.run("python", "tools/ensure_system_packages.py")
    session.run("python", "-m", "codegen", "--check")
    _console_check(session)
    session.run("ruff", "check", *LINT_PATHS)
    session.run("mypy")
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def codegen(session: nox.Session) -> None:
    """Regenerate generated/ from spec/ (`-- --check` fails on any drift)."""
    _install(session, "codegen")
    _npm_ci(session)
    session.run("python", "-m", "codegen", *session.posargs)


def _console_check(session: nox.Session) -> None:
    # The web console's bundle is committed (so `nox -s serve` needs no Node);
    # this rebuilds it in memory, fails on drift or over its size budget, and
    # type-checks its sources against the generated TypeScript types.
    session.run("node", "console/build.mjs", "--check", external=True)
    session.run("node_modules/.bin/tsc", "-p", "console/tsconfig.json", external=True)


@nox.session(python=PYTHON)
def console(session: nox.Session) -> None:
    """Rebuild the web console into src/palyra/console/assets (`node console/build.mjs`)."""
    _npm_ci(session)
    session.run("node", "console/build.mjs", external=True)
    session.run("node_modules/.bin/tsc", "-p", "console/tsconfig.json", external=True)


@nox.session(python=PYTHON)
def spec_diff(session: nox.Session) -> None:
    """Markdown report of spec changes against a git ref (default: merge base with main)."""
    _install(session, "codegen")
    session.run("python", "-m", "codegen.spec_diff", *session.posargs)


@nox.session(python=PYTHON, tags=["check"])
def lint(session: nox.Session) -> None:
    """ruff over the hand-written code (generated/ is excluded)."""
    _install(session, "dev")
    session.run("ruff", "check", *LINT_PATHS)


@nox.session(python=PYTHON, tags=["check"])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src/ and generated/python."""
    _install(session, "dev")
    session.run("mypy")


@nox.session(python=PYTHON)
def interpreter(session: nox.Session) -> None:
    """Print the Python the session venvs are built with (nothing installed)."""
    session.run("python", "-c", "import platform, sys; "
                "print(platform.python_version(), sys.base_prefix)")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: `nox -s bench -- journal | tool-loop [--hitl] | memory | ingress [...]`."""
    _install(session, "codegen", "test", "bench")
    session.run("python", "-m", "bench", *session.posargs)
