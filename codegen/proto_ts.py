"""TypeScript messages and service descriptors via protoc-gen-es (``target=ts+js+dts``).

The ``.ts`` sources serve the repo's own conformance client (run with tsx); the
``.js`` + ``.d.ts`` pairs are what the installable ``@palyra/client`` package
(``codegen/ts_package.py``) ships, so a user's project needs no TypeScript
toolchain to import it.

connect v2 clients are built from the service descriptors protoc-gen-es emits,
so no connect-es plugin is needed. ``google/api/{annotations,http}.proto`` are
generated too, because palyra's files import them. ``import_extension=js`` makes
relative imports valid Node ESM (``module: nodenext``) and for tsx.
"""

from __future__ import annotations

from pathlib import Path

from codegen.banner import TYPESCRIPT, banner, strip_leading_comments
from codegen.layout import SpecLayout, node_tool
from codegen.protoc import protoc_command

GENERATOR = "codegen/proto_ts.py, protoc-gen-es"
_EXTRA = ("google/api/annotations.proto", "google/api/http.proto")


def _inputs(layout: SpecLayout) -> list[str]:
    extra = [p for p in _EXTRA if (layout.third_party_dir / p).is_file()]
    return [*layout.palyra_protos(), *extra]


def command(layout: SpecLayout, ts_dir: Path) -> list[str]:
    """The protoc command generating TypeScript into ``ts_dir``."""
    return protoc_command(
        layout,
        [
            f"--plugin=protoc-gen-es={node_tool('protoc-gen-es')}",
            f"--es_out={ts_dir}",
            "--es_opt=target=ts+js+dts,import_extension=js",
            *_inputs(layout),
        ],
    )


def postprocess(layout: SpecLayout, ts_dir: Path) -> None:
    """Swap protoc-gen-es' header (it names the plugin version) for the banner."""
    for path in sorted(p for p in ts_dir.rglob("*_pb.*") if p.suffix in (".ts", ".js")):
        stem = path.relative_to(ts_dir).as_posix()
        source = stem[: stem.rindex("_pb.")] + ".proto"
        body = strip_leading_comments(path.read_text(encoding="utf-8"), TYPESCRIPT)
        path.write_text(
            banner(TYPESCRIPT, GENERATOR, [layout.proto_label(source)]) + "\n" + body,
            encoding="utf-8",
        )
