"""No file of the project holds a merge conflict's markers.

A conflict committed by mistake once sat in docs/architecture.md for a whole
session; this walks every text file of the tree (what the project writes, not
installed packages or build output) and names each marker line it finds.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".git", ".nox", "node_modules", "build", "dist", ".venv", "__pycache__", ".schemathesis"}
SUFFIXES = {".py", ".md", ".proto", ".toml", ".yaml", ".yml", ".ts", ".tsx", ".js", ".mjs",
            ".json", ".txt", ".css", ".html", ".cedar", ".sh", ".wat", ".cfg", ".ini"}
MARKERS = ("<<<<<<< ", ">>>>>>> ")


def _files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if parts & SKIP or not path.is_file():
            continue
        if path.suffix in SUFFIXES or path.name in ("run", "Containerfile"):
            found.append(path)
    return found


def test_no_file_holds_conflict_markers() -> None:
    files = _files()
    assert len(files) > 100  # the walk found the project
    marked = [f"{path.relative_to(ROOT)}:{number}"
              for path in files
              for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
              if line.startswith(MARKERS)]
    assert marked == []
