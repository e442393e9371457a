"""Task runner. CI calls only `nox -s tests` (see .ci/run and the README)."""

from __future__ import annotations

import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests"]

PYTHON = "3.11"


def _install(session: nox.Session, *extras: str) -> None:
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


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
    """The whole suite, including the codegen drift check and the TypeScript client."""
    _install(session, "codegen", "test")
    _npm_ci(session)
    session.run("python", "-m", "codegen", "--check")
    session.run("pytest", *session.posargs)


@nox.session(python=PYTHON)
def codegen(session: nox.Session) -> None:
    """Regenerate generated/ from spec/ (`-- --check` fails on any drift)."""
    _install(session, "codegen")
    _npm_ci(session)
    session.run("python", "-m", "codegen", *session.posargs)


@nox.session(python=PYTHON)
def spec_diff(session: nox.Session) -> None:
    """Markdown report of spec changes against a git ref (default: merge base with main)."""
    _install(session, "codegen")
    session.run("python", "-m", "codegen.spec_diff", *session.posargs)


@nox.session(python=PYTHON, tags=["check"])
def lint(session: nox.Session) -> None:
    """ruff over the hand-written code (generated/ is excluded)."""
    session.install("ruff==0.17.5")
    session.run("ruff", "check", "src", "tests", "codegen", "bench", "noxfile.py")


@nox.session(python=PYTHON, tags=["check"])
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src/."""
    _install(session, "dev")
    session.run("mypy")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Benchmarks: `nox -s bench -- journal` or `nox -s bench -- tool-loop [--hitl] [...]`."""
    _install(session, "codegen", "test")
    session.run("python", "-m", "bench", *session.posargs)
