"""Orchestration: load and check the spec, render every output, install or compare.

Everything is rendered into a staging directory first and only then copied over
the output tree, so a failing run never leaves ``generated/`` half-written, and
``--check`` shares the exact code path of a real run.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codegen import (
    checks,
    codec_plans,
    proto_comments,
    proto_python,
    proto_ts,
    render_codecs,
    render_errors,
    render_field_rules,
    render_lifecycle,
    render_mermaid,
    render_routes,
    render_services,
    ts_package,
)
from codegen.banner import MERMAID, PYTHON, TYPESCRIPT, banner, ruff_format
from codegen.descriptors import ProtoSpec, load_proto_spec
from codegen.diagnostics import SpecError
from codegen.drift import diff_trees
from codegen.layout import SpecLayout
from codegen.lifecycle_model import Lifecycle, load_lifecycle
from codegen.protoc import check_result, tool_env

#: Subtrees of the output root that codegen owns and replaces wholesale.
MANAGED = ("python/palyra_gen", "ts", "docs")


@dataclass(frozen=True)
class Spec:
    """The parsed, checked spec."""

    layout: SpecLayout
    proto: ProtoSpec
    lifecycles: tuple[Lifecycle, ...]


def load_spec(spec_root: Path) -> Spec:
    """Parse the spec and run every check; raise ``SpecError`` listing all problems."""
    layout = SpecLayout(spec_root)
    problems: list[str] = []
    lifecycles: list[Lifecycle] = []
    for path in layout.lifecycle_files():
        try:
            lifecycles.append(load_lifecycle(path, layout.label(path)))
        except SpecError as exc:
            problems += exc.problems
    proto = load_proto_spec(layout)
    for lc in lifecycles:
        own = checks.check_lifecycle(lc)
        problems += own + checks.check_lifecycle_enum(lc, proto, layout)
        if not own:
            problems += checks.check_statemachine_accepts(lc, layout)
    problems += checks.check_rpcs(proto, layout)
    problems += checks.check_error_codes(proto, layout)
    if problems:
        raise SpecError(problems)
    return Spec(layout, proto, tuple(lifecycles))


def render(spec: Spec, stage: Path) -> None:
    """Write every output under ``stage`` (an empty directory)."""
    layout = spec.layout
    package = stage / "python" / proto_python.PACKAGE
    ts_dir = stage / "ts"
    package.mkdir(parents=True)
    ts_dir.mkdir()
    # The two protoc plugin runs dominate the run time; run them side by side, in an
    # empty cwd (see protoc.run_protoc) with this venv's tools first on PATH.
    workdir = stage / "_work"
    workdir.mkdir()
    jobs = [
        (proto_python.command(layout, package), "running betterproto2"),
        (proto_ts.command(layout, ts_dir), "running protoc-gen-es"),
    ]
    procs = [
        (
            subprocess.Popen(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=tool_env(),
                cwd=workdir,
            ),
            what,
        )
        for cmd, what in jobs
    ]
    for proc, what in procs:
        out, err = proc.communicate()
        check_result(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), what)
    shutil.rmtree(workdir)
    proto_python.postprocess(layout, package)
    _render_codecs(layout, package)
    proto_ts.postprocess(layout, ts_dir)
    ts_package.render(ts_dir, banner(TYPESCRIPT, ts_package.GENERATOR, ["codegen/ts_package/"]))

    _write(
        package / "lifecycle" / "__init__.py",
        PYTHON,
        render_lifecycle.GENERATOR,
        [lc.label for lc in spec.lifecycles],
        render_lifecycle.render_package(spec.lifecycles),
    )
    docs = stage / "docs"
    for lc in spec.lifecycles:
        _write(
            package / "lifecycle" / f"{lc.stem}.py",
            PYTHON,
            render_lifecycle.GENERATOR,
            [lc.label],
            render_lifecycle.render_module(lc, lc.enum_name),
        )
        _write(
            docs / f"{lc.stem}.mmd",
            MERMAID,
            render_mermaid.GENERATOR,
            [lc.label],
            render_mermaid.render(lc),
        )
    errors_enum = spec.proto.enums[checks.ERROR_CODE_ENUM]
    errors_label = layout.proto_label(errors_enum.file)
    _write(
        package / "errors.py",
        PYTHON,
        render_errors.GENERATOR,
        [errors_label],
        render_errors.render(errors_enum, errors_label),
    )
    _write(
        package / "proto_docs.py",
        PYTHON,
        "codegen/proto_comments.py",
        [layout.proto_label(f) for f in spec.proto.files],
        proto_comments.render(spec.proto.docs),
    )
    _write(
        package / "field_rules.py",
        PYTHON,
        render_field_rules.GENERATOR,
        [layout.proto_label(f) for f in spec.proto.files],
        render_field_rules.render(spec.proto.field_rules),
    )
    route_sources = sorted({layout.proto_label(r.file) for r in spec.proto.rpcs})
    _write(
        package / "services.py",
        PYTHON,
        render_services.GENERATOR,
        route_sources,
        render_services.render(spec.proto.rpcs),
    )
    _write(
        package / "http_routes.py",
        PYTHON,
        render_routes.GENERATOR,
        route_sources,
        render_routes.render(spec.proto.rpcs),
    )
    ruff_format(stage / "python")


def _render_codecs(layout: SpecLayout, package: Path) -> None:
    """The fast JSON and binary codecs, from the messages betterproto2 just generated."""
    plans = codec_plans.read_plans(package.parent)
    sources = [layout.proto_label(p) for p in layout.palyra_protos()]
    runtime = (Path(render_codecs.__file__).parent / "codec_runtime.py").read_text(encoding="utf-8")
    _write(package / "codec_runtime.py", PYTHON, render_codecs.RUNTIME_GENERATOR, sources,
           runtime)
    _write(package / "proto_json.py", PYTHON, render_codecs.GENERATOR, sources,
           render_codecs.render_json(plans))
    _write(package / "proto_binary.py", PYTHON, render_codecs.GENERATOR, sources,
           render_codecs.render_binary(plans))


def _write(path: Path, comment: str, generator: str, sources: list[str], body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(banner(comment, generator, sources) + "\n" + body, encoding="utf-8")


def generate(spec_root: Path, out_root: Path) -> int:
    """Regenerate ``out_root`` from ``spec_root``; returns the number of files written."""
    spec = load_spec(spec_root)
    with tempfile.TemporaryDirectory(prefix="palyra-codegen-") as tmp:
        stage = Path(tmp)
        render(spec, stage)
        count = 0
        for sub in MANAGED:
            target = out_root / sub
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(stage / sub, target)
            count += sum(1 for p in target.rglob("*") if p.is_file())
    return count


def check(spec_root: Path, out_root: Path) -> str:
    """Regenerate into a temp dir and diff against ``out_root``; "" means no drift."""
    spec = load_spec(spec_root)
    with tempfile.TemporaryDirectory(prefix="palyra-codegen-check-") as tmp:
        stage = Path(tmp)
        render(spec, stage)
        return diff_trees(stage, out_root, label=out_root.name)
