"""betterproto2 messages + grpclib stubs as the package ``palyra_gen``.

betterproto2 writes a package that imports itself relatively (``message_pool``,
``google/protobuf`` WKTs), so it must be generated *into* ``palyra_gen/``. Its
header names the plugin; it is replaced by palyra's banner, which names the spec
files instead.
"""

from __future__ import annotations

from pathlib import Path

from codegen.banner import PYTHON, banner, strip_leading_comments
from codegen.layout import SpecLayout, venv_tool
from codegen.protoc import protoc_command

GENERATOR = "codegen/proto_python.py, betterproto2-compiler"
PACKAGE = "palyra_gen"
_OPTIONS = "client_generation=async,server_generation=async"


def command(layout: SpecLayout, package_dir: Path) -> list[str]:
    """The protoc command generating betterproto2 output into ``package_dir``."""
    plugin = venv_tool("protoc-gen-python_betterproto2")
    return protoc_command(
        layout,
        [
            f"--plugin=protoc-gen-python_betterproto2={plugin}",
            f"--python_betterproto2_out={package_dir}",
            f"--python_betterproto2_opt={_OPTIONS}",
            *layout.palyra_protos(),
        ],
    )


def postprocess(layout: SpecLayout, package_dir: Path) -> None:
    """Replace plugin headers with banners naming each file's spec sources."""
    all_sources = [layout.proto_label(p) for p in layout.palyra_protos()]
    for path in sorted(package_dir.rglob("*")):
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8")
        sources = _declared_sources(text) or ()
        labels = [layout.proto_label(s) for s in sources] or all_sources
        if path.name == "py.typed":
            # PEP 561 marker: tools only look for "partial"; a comment is harmless.
            path.write_text(banner(PYTHON, GENERATOR, labels), encoding="utf-8")
            continue
        body = strip_leading_comments(text, PYTHON)
        path.write_text(
            banner(PYTHON, GENERATOR, labels) + ("\n" + body if body else ""), encoding="utf-8"
        )


def _declared_sources(text: str) -> list[str] | None:
    # betterproto2 lists the protos behind a module as "# sources: a.proto, b.proto".
    for line in text.splitlines()[:5]:
        if line.startswith("# sources:"):
            return [s.strip() for s in line.removeprefix("# sources:").split(",") if s.strip()]
    return None
