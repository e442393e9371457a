"""The layer rules of docs/architecture.md, checked over the real import graph.

Arrows point down only: transport → application → ports → core. A violation
here is a design bug, not a style nit: it is how a pure core grows I/O.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "palyra"

# package → palyra packages it must never import
FORBIDDEN: dict[str, set[str]] = {
    "core": {"journal", "policy", "tools", "providers", "engine", "app", "transport", "cli",
             "config", "daemon", "wiring"},
    "journal": {"policy", "tools", "providers", "engine", "app", "transport", "cli", "daemon"},
    "policy": {"journal", "engine", "app", "transport", "cli", "daemon"},
    "tools": {"journal", "engine", "app", "transport", "cli", "daemon"},
    "providers": {"journal", "policy", "engine", "app", "transport", "cli", "daemon"},
    "engine": {"app", "transport", "cli", "daemon", "wiring", "config"},
    "app": {"transport", "cli", "daemon", "wiring"},
    # Transports speak only to the application facade (duck-typed) and core.
    "transport": {"journal", "policy", "tools", "providers", "engine", "cli", "daemon"},
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


def test_the_checker_sees_imports(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("import palyra.engine\nfrom palyra.journal import JournalStore\n")
    assert _palyra_imports(sample) == {"engine", "journal"}
