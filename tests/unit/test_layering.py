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
             "config", "daemon", "testing", "adapters", "tasks", "watchdog", "memory",
             "learning", "agents"},
    "journal": {"policy", "tools", "providers", "engine", "app", "transport", "cli", "daemon",
                "testing", "adapters", "tasks", "watchdog", "memory", "learning", "agents"},
    "policy": {"journal", "engine", "app", "transport", "cli", "daemon", "testing", "tools",
               "adapters"},
    "tools": {"journal", "engine", "app", "transport", "cli", "daemon", "testing", "providers",
              "adapters"},
    "providers": {"journal", "policy", "engine", "app", "transport", "cli", "daemon", "testing",
                  "adapters"},
    # The engine codes against its ports; ``adapters`` binds them to policy and tools.
    "engine": {"app", "transport", "cli", "daemon", "config", "testing", "policy", "tools",
               "adapters", "tasks", "watchdog", "memory", "learning", "agents"},
    "adapters": {"app", "transport", "cli", "daemon", "config", "testing"},
    # Background work sits on the journal; it knows nothing of runs or transports
    # (the composition root wires run ends to it).
    "tasks": {"engine", "app", "transport", "cli", "daemon", "config", "testing", "policy",
              "tools", "providers", "adapters", "watchdog", "memory", "learning"},
    # The watchdog looks at the engine and the task queue; nothing above them.
    "watchdog": {"app", "transport", "cli", "daemon", "config", "testing", "adapters",
                 "learning"},
    # Agents and bindings are journal data and pure routing.
    "agents": {"engine", "app", "transport", "cli", "daemon", "config", "testing", "policy",
               "tools", "providers", "adapters", "tasks", "watchdog", "learning", "memory"},
    # Memory items are journal data: nothing of runs, tasks or transports.
    "schedules": {"engine", "app", "transport", "cli", "daemon", "config", "testing", "policy",
                  "tools", "providers", "adapters", "watchdog", "learning", "memory", "agents",
                  "usage"},
    "usage": {"engine", "app", "transport", "cli", "daemon", "config", "testing", "policy",
              "tools", "providers", "adapters", "tasks", "watchdog", "learning", "memory",
              "agents"},
    "memory": {"engine", "app", "transport", "cli", "daemon", "config", "testing", "policy",
               "tools", "providers", "adapters", "tasks", "watchdog", "learning"},
    # Reflection reads runs' tapes and asks a provider, as a task; the app reviews.
    "learning": {"app", "transport", "cli", "daemon", "config", "testing", "adapters",
                 "watchdog", "policy", "tools"},
    "app": {"transport", "cli", "daemon", "testing", "adapters"},
    # Transports speak only to the application facade (duck-typed) and core;
    # the daemon hands them their sockets, tokens and config.
    "transport": {"journal", "policy", "tools", "providers", "engine", "cli", "daemon", "testing",
                  "adapters"},
    # The web console's built files and their lookup: data, no palyra code at all
    # (the HTTP transport serves them; the page calls the public API like any client).
    "console": {"core", "journal", "policy", "tools", "providers", "engine", "app", "transport",
                "cli", "config", "daemon", "testing", "adapters", "tasks", "watchdog", "memory",
                "learning", "agents"},
    # The composition root may import everything below it, never the CLI above it.
    # Operations reads what the application committed and holds (metrics, spans,
    # readiness, doctor); the daemon serves it, the transports never see it.
    "ops": {"transport", "cli", "daemon", "testing"},
    # How third-party libraries are imported: runs first (palyra/__init__), imports no palyra.
    "imports": {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()} - {"imports"},
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


def _imported_modules(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``from a.b import c`` gives a.b and a.b.c)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _private_imports(path: Path) -> list[str]:
    """Imports of another top-level package's ``_private`` module from ``path``."""
    return _private_names(_module_name(path), _imported_modules(path))


def _private_names(module: str, imported: set[str]) -> list[str]:
    own = _top_package(module)
    bad = []
    for name in sorted(imported):
        parts = name.split(".")
        if parts[0] != "palyra" or len(parts) < 3 or parts[1] == own:
            continue
        if any(part.startswith("_") and not part.startswith("__") for part in parts[2:]):
            bad.append(f"{module} imports {name}")
    return bad


def test_no_package_imports_another_packages_private_modules() -> None:
    violations = [v for path in sorted(SRC.rglob("*.py")) for v in _private_imports(path)]
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize("package", ["engine", "journal"])
def test_a_package_with_rooms_is_used_only_through_its_front_door(package: str) -> None:
    """Outside ``engine/`` and ``journal/``, only the package itself is imported, never a room."""
    exports = _exports(package)
    violations = [
        f"{_module_name(path)} imports {name}"
        for path in sorted(SRC.rglob("*.py"))
        if _top_package(_module_name(path)) != package
        for name in sorted(_imported_modules(path))
        if name.startswith(f"palyra.{package}.") and name.split(".")[2] not in exports
    ]
    assert not violations, "\n".join(violations)


def _exports(package: str) -> set[str]:
    tree = ast.parse((SRC / package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return {ast.literal_eval(elt) for elt in node.value.elts}  # type: ignore[attr-defined]
    raise AssertionError(f"palyra.{package} has no __all__")


# The journal's rooms, and what each must never import of its siblings. ``format``
# is bytes only (no environment, no store); reads and retention know nothing of the
# writer; verification trusts no writer or retention code, only the format.
# ``_types``, ``_env`` (the LMDB environment) and ``_store`` (the facade) sit
# beside the rooms. ``postgres`` is the writer's and the readers' twin on PostgreSQL:
# like ``write``, it trusts no verification code.
JOURNAL_ROOMS: dict[str, set[str]] = {
    "postgres": {"verify"},
    # The transparency log's formats and proofs: pure, over the record format only.
    "tlog": {"read", "write", "verify", "retention", "postgres", "_env", "_store"},
    "format": {"read", "write", "verify", "retention", "_env", "_store"},
    "read": {"write", "verify", "retention"},
    "verify": {"write", "retention"},
    "retention": {"read", "write", "verify"},
    "write": {"verify"},
}


def _journal_room_violations(module: str, imported: set[str]) -> list[str]:
    parts = module.split(".")
    if len(parts) < 4 or parts[:2] != ["palyra", "journal"] or parts[2] not in JOURNAL_ROOMS:
        return []
    return [
        f"{module} imports {name}"
        for name in sorted(imported)
        if name.startswith("palyra.journal.")
        and name.split(".")[2] in JOURNAL_ROOMS[parts[2]]
    ]


def test_the_journal_rooms_respect_their_layers() -> None:
    rooms = sorted(p.name for p in (SRC / "journal").iterdir() if (p / "__init__.py").exists())
    assert rooms == sorted(JOURNAL_ROOMS)
    violations = [
        v
        for path in sorted((SRC / "journal").rglob("*.py"))
        for v in _journal_room_violations(_module_name(path), _imported_modules(path))
    ]
    assert not violations, "\n".join(violations)


def test_the_journal_room_check_sees_violations() -> None:
    assert _journal_room_violations(
        "palyra.journal.format.record", {"palyra.journal.write.writer", "palyra.core.chain"}
    ) == ["palyra.journal.format.record imports palyra.journal.write.writer"]
    assert _journal_room_violations("palyra.journal.write.writer", {"palyra.journal.format"}) == []
    assert _journal_room_violations("palyra.journal._store", {"palyra.journal.write"}) == []


def test_engine_model_is_pure() -> None:
    """``engine/model`` holds data and decisions: no asyncio, no journal, no store handle."""
    forbidden = ("asyncio", "palyra.journal", "palyra.engine.run", "palyra.engine.sessions")
    violations = [
        f"{_module_name(path)} imports {name}"
        for path in sorted((SRC / "engine" / "model").rglob("*.py"))
        for name in sorted(_imported_modules(path))
        if name.startswith(forbidden)
    ]
    assert not violations, "\n".join(violations)


def _import_graph() -> dict[str, set[str]]:
    modules = {_module_name(path): path for path in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = {m for m in _imported_modules(path) if m in modules and m != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One representative cycle per strongly connected component with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_src_has_no_import_circle() -> None:
    """Every import counts, ``TYPE_CHECKING`` ones too: a circle is a design knot either way.

    A package's ``__init__`` re-exporting its own modules is not a circle of
    concepts, so edges from a package to its own submodules are left out.
    """
    graph = _import_graph()
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not t.startswith(name + ".")}
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_private_import_check_sees_violations() -> None:
    assert _private_names("palyra.app._runs", {"palyra.engine._tape", "palyra.engine"}) == [
        "palyra.app._runs imports palyra.engine._tape"]
    assert _private_names("palyra.engine.engine", {"palyra.engine.run._x"}) == []
    assert _private_names("palyra.app._runs", {"palyra.engine.__init__", "palyra.core.ids"}) == []
