"""Where things live: the spec tree, the output tree and the external tools.

Everything is derived from two roots (``--spec`` and ``--out``) so tests can run
the generator on fixture specs without touching the real tree.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from codegen.diagnostics import ToolError

#: The repository root (parent of the ``codegen`` package).
REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SpecLayout:
    """The parts of a spec root (normally ``spec/``)."""

    root: Path

    def __post_init__(self) -> None:
        # Absolute, because protoc runs with a different working directory.
        object.__setattr__(self, "root", self.root.resolve())

    @property
    def proto_dir(self) -> Path:
        """Import root of palyra's own protos (``spec/proto``)."""
        return self.root / "proto"

    @property
    def third_party_dir(self) -> Path:
        """Import root of vendored protos such as ``google/api`` (``spec/third_party``)."""
        return self.root / "third_party"

    @property
    def lifecycle_dir(self) -> Path:
        """Directory of lifecycle YAML documents (``spec/lifecycle``)."""
        return self.root / "lifecycle"

    def palyra_protos(self) -> list[str]:
        """Import paths of palyra's protos, sorted so protoc input order never varies."""
        return sorted(
            p.relative_to(self.proto_dir).as_posix() for p in self.proto_dir.rglob("*.proto")
        )

    def lifecycle_files(self) -> list[Path]:
        """The lifecycle YAML documents, sorted."""
        return sorted(self.lifecycle_dir.glob("*.yaml"))

    def label(self, path: Path) -> str:
        """A stable display name for a spec file: ``spec/<relative path>``.

        Banners and messages use this instead of absolute paths so the output does
        not depend on where the spec lives (fixture specs render identically).
        """
        return "spec/" + path.resolve().relative_to(self.root.resolve()).as_posix()

    def proto_label(self, import_path: str) -> str:
        """Display name for a proto import path, wherever protoc found it."""
        for base in (self.proto_dir, self.third_party_dir):
            if (base / import_path).is_file():
                return self.label(base / import_path)
        # Well-known types come from protoc's own include directory.
        return f"{import_path} (protoc built-in)"


def protoc_include() -> Path:
    """grpcio-tools' bundled include dir (well-known types such as descriptor.proto)."""
    return Path(str(resources.files("grpc_tools") / "_proto"))


def venv_tool(name: str) -> str:
    """Path of a console script installed next to this interpreter, else from PATH.

    Looking beside ``sys.executable`` first makes ``.venv/bin/python -m codegen``
    work without an activated venv.
    """
    candidate = Path(sys.executable).parent / name
    if candidate.is_file():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise ToolError(f"{name} not found next to {sys.executable} or on PATH")
    return found


def node_tool(name: str) -> str:
    """Path of an npm-installed binary in the repo's ``node_modules/.bin``."""
    candidate = REPO_ROOT / "node_modules" / ".bin" / name
    if not candidate.exists():
        raise ToolError(f"{candidate} is missing; run `npm ci` in {REPO_ROOT}")
    if shutil.which("node") is None:
        raise ToolError("node is not on PATH (needed by protoc-gen-es)")
    return str(candidate)
