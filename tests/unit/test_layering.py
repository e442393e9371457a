"""The layer rules of docs/architecture.md, checked over the real import graph.

Arrows point down only: daemon (composition root) → transport → application →
ports → core. A violation here is a design bug, not a style nit: it is how a
pure core grows I/O. ``palyra.testing`` sits beside the tree for tests and
benchmarks: nothing in ``src/palyra`` imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "palyra"

# package → palyra packages it must never import
FORBIDDEN: dict[str, set[str]] = {
    "core": {"journal", "policy", "tools", "providers", "engine", "app", "transport", "cli",
             "config", "daemon", "testing"},
    "journal": {"policy", "tools", "providers", "engine", "app", "transport", "cli", "daemon",
                "testing"},
    "policy": {"journal", "engine", "app", "transport", "cli", "daemon", "testing"},
    "tools": {"journal", "engine", "app", "transport", "cli", "daemon", "testing"},
    "providers": {"journal", "policy", "engine", "app", "transport", "cli", "daemon", "testing"},
    "engine": {"app", "transport", "cli", "daemon", "config", "testing"},
    "app": {"transport", "cli", "daemon", "testing"},
    # Transports speak only to the application facade (duck-typed) and core;
    # the daemon hands them their sockets, tokens and config.
    "transport": {"journal", "policy", "tools", "providers", "engine", "cli", "daemon", "testing"},
    # The composition root may import everything below it, never the CLI above it.
    "daemon": {"cli", "testing"},
    "cli": {"testing"},
    "config": {"testing"},
}


def _palyra_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        for name in names:
            parts = name.split(".")
            if parts[0] == "palyra" and len(parts) > 1:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_respects_the_layers(package: str) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    assert files, f"no sources under {package}"
    violations = [
        f"{path.relative_to(SRC)} imports palyra.{target}"
        for path in files
        for target in sorted(_palyra_imports(path) & FORBIDDEN[package])
    ]
    assert not violations, "\n".join(violations)


def test_nothing_in_src_imports_testing() -> None:
    # Broader than the table: also the package roots and any future package.
    offenders = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if path.relative_to(SRC).parts[0] != "testing" and "testing" in _palyra_imports(path)
    ]
    assert not offenders


def test_src_has_no_loose_modules() -> None:
    # Each concept lives in a package; only the package marker sits at the top.
    assert sorted(p.name for p in SRC.glob("*.py")) == ["__init__.py"]


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import palyra.engine\nfrom palyra.journal import JournalStore\n")
    assert _palyra_imports(sample) == {"engine", "journal"}
