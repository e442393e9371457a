"""Skills under Wasmtime: the example skill, fuel, the memory cap, WASI preopens,
the network host function, install checks and states, and `palyra skills`."""

from __future__ import annotations

import base64
import hashlib
import http.server
import io
import json
import shutil
import socket
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palyra.cli.main import main as palyra
from palyra.tools import ToolContext, ToolError, ToolRegistry, ToolResult
from palyra.tools.skills import (
    Limits,
    ManifestError,
    install,
    read_manifest,
    register_skills,
    set_state,
)
from palyra.tools.skills.manifest import (
    SkillTool,
    legacy_signing_message,
    parse_manifest,
    signing_message,
)
from palyra.tools.skills.runtime import verify_signature

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "skills" / "add"

# Test modules, assembled by the runtime like the example. $path_open is WASI's;
# http_get is palyra's only way out to the network.
PROBES = """
(module
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "palyra" "http_get" (func $get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "note.txt")
  (data (i32.const 64) "http://evil.example/x")
  (data (i32.const 128) "http://localhost/x")
  (func (export "spin") (result f64) (loop br 0) f64.const 0)
  (func (export "hog") (param $pages f64) (result f64)
    (if (i32.eq (memory.grow (i32.trunc_f64_u (local.get $pages))) (i32.const -1))
      (then unreachable))
    f64.const 1)
  ;; open note.txt under the first preopened directory (fd 3): 0, or WASI's errno
  (func (export "open") (result f64)
    (f64.convert_i32_s (call $path_open (i32.const 3) (i32.const 0) (i32.const 16)
      (i32.const 8) (i32.const 0) (i64.const 2) (i64.const 0) (i32.const 0) (i32.const 256))))
  (func (export "evil") (result f64)
    (f64.convert_i32_s (call $get (i32.const 64) (i32.const 21) (i32.const 1024) (i32.const 64))))
  (func (export "local") (result f64)
    (f64.convert_i32_s (call $get (i32.const 128) (i32.const 18) (i32.const 1024) (i32.const 64)))))
"""


def make_skill(root: Path, name: str, *, network: list[str] | None = None,
               filesystem: list[str] | None = None) -> Path:
    directory = root / name
    directory.mkdir(parents=True)
    (directory / "probes.wat").write_text(PROBES)
    tools = [{"name": n, "description": n, "export": n, "params": p}
             for n, p in (("spin", []), ("hog", ["pages"]), ("open", []), ("evil", []),
                          ("local", []))]
    (directory / "skill.json").write_text(json.dumps({
        "name": name, "version": "0.1.0", "module": "probes.wat",
        "sha256": hashlib.sha256(PROBES.encode()).hexdigest(), "tools": tools,
        "capabilities": {"network": network or [], "filesystem": filesystem or []}}))
    return directory


def _registry(skills: Path, **limits: Any) -> ToolRegistry:
    registry = ToolRegistry()
    register_skills(skills, registry, limits=Limits(**limits))
    return registry


def _value(result: ToolResult) -> Any:
    assert result.success, result.error
    return msgspec.json.decode(result.output_json)["result"]


async def test_the_example_skill_installs_and_adds(tmp_path: Path, ctx: ToolContext) -> None:
    manifest = install(EXAMPLE, tmp_path / "skills")
    assert manifest.skill_id == "demo@1.0.0"
    registry = _registry(tmp_path / "skills")
    result = await registry.execute("skill.demo.add", {"a": 2, "b": 40}, ctx)
    assert _value(result) == 42.0
    assert result.facts["skill.id"] == "demo@1.0.0"
    assert result.facts["skill.module_sha256"] == manifest.sha256
    assert 0 < int(result.facts["skill.fuel_used"]) < 100
    bad = await registry.execute("skill.demo.add", {"a": "two", "b": 1}, ctx)
    assert not bad.success and "invalid arguments" in bad.error


def test_a_module_that_does_not_match_its_digest_is_not_installed(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(EXAMPLE, source)
    (source / "add.wat").write_text((source / "add.wat").read_text().replace("f64.add", "f64.sub"))
    with pytest.raises(Exception, match="does not match the manifest"):
        install(source, tmp_path / "skills")
    assert not (tmp_path / "skills" / "demo").exists()
    (source / "skill.json").write_text('{"name": "Bad"}')
    with pytest.raises(ManifestError):
        read_manifest(source)


async def test_fuel_stops_an_endless_loop(tmp_path: Path, ctx: ToolContext) -> None:
    make_skill(tmp_path / "skills", "probe")
    result = await _registry(tmp_path / "skills", fuel=1_000_000).execute(
        "skill.probe.spin", {}, ctx)
    assert not result.success and "all fuel consumed" in result.error
    assert result.facts["skill.stopped"] == "fuel"
    assert result.facts["skill.fuel_used"] == "1000000"


async def test_the_memory_cap_stops_an_allocation(tmp_path: Path, ctx: ToolContext) -> None:
    make_skill(tmp_path / "skills", "probe")
    capped = _registry(tmp_path / "skills", memory_bytes=1024 * 1024)  # 16 pages
    result = await capped.execute("skill.probe.hog", {"pages": 64}, ctx)
    assert not result.success and result.facts["skill.stopped"] == "trap"
    assert int(result.facts["skill.memory_bytes"]) <= 1024 * 1024
    roomy = _registry(tmp_path / "skills", memory_bytes=8 * 1024 * 1024)
    assert _value(await roomy.execute("skill.probe.hog", {"pages": 64}, ctx)) == 1.0


async def test_only_granted_paths_are_open(tmp_path: Path, workspace: Path,
                                           ctx: ToolContext) -> None:
    (workspace / "notes").mkdir()
    (workspace / "notes" / "note.txt").write_text("hi")
    make_skill(tmp_path / "none", "probe")
    make_skill(tmp_path / "some", "probe", filesystem=["notes"])
    refused = await _registry(tmp_path / "none").execute("skill.probe.open", {}, ctx)
    assert _value(refused) == 8.0  # EBADF: no directory was opened to it
    granted = await _registry(tmp_path / "some").execute("skill.probe.open", {}, ctx)
    assert _value(granted) == 0.0


async def test_only_granted_hosts_at_public_addresses(tmp_path: Path, ctx: ToolContext) -> None:
    make_skill(tmp_path / "skills", "probe", network=["localhost"])
    registry = _registry(tmp_path / "skills")
    evil = await registry.execute("skill.probe.evil", {}, ctx)
    assert _value(evil) == -1.0
    assert "host 'evil.example' not granted" in evil.facts["skill.refused"]
    local = await registry.execute("skill.probe.local", {}, ctx)
    assert _value(local) == -2.0  # granted by name, but http.fetch's filter refuses loopback
    assert "loopback" in local.facts["skill.refused"]


def test_only_enabled_skills_are_registered(tmp_path: Path) -> None:
    skills = tmp_path / "skills"
    install(EXAMPLE, skills)
    set_state(skills / "demo", "quarantined")
    assert _registry(skills).get("skill.demo.add") is None
    set_state(skills / "demo", "enabled")
    assert _registry(skills).get("skill.demo.add") is not None


def test_the_cli(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    skills = str(tmp_path / "skills")
    assert palyra(["skills", "--skills-dir", skills, "install", str(EXAMPLE)]) == 0
    assert "installed demo@1.0.0" in capfd.readouterr().out
    assert palyra(["skills", "--skills-dir", skills, "quarantine", "demo"]) == 0
    assert palyra(["skills", "--skills-dir", skills, "list"]) == 0
    listing = capfd.readouterr().out
    assert "quarantined" in listing and "skill.demo.add" in listing
    assert palyra(["skills", "--skills-dir", skills, "disable", "nope"]) == 1
    assert palyra(["skills", "--skills-dir", skills, "remove", "demo"]) == 0
    assert not (tmp_path / "skills" / "demo").exists()


def _signed_copy(tmp_path: Path, name: str, key: Ed25519PrivateKey | None,
                 **changes: Any) -> Path:
    source = tmp_path / name
    shutil.copytree(EXAMPLE, source)
    manifest = msgspec.structs.replace(read_manifest(source), **changes)
    if key is not None:
        signature = key.sign(signing_message(manifest))
        manifest = msgspec.structs.replace(manifest, signature=base64.b64encode(signature).decode())
    (source / "skill.json").write_bytes(msgspec.json.encode(manifest))
    return source


def _public(key: Ed25519PrivateKey) -> str:
    raw = key.public_key().public_bytes(serialization.Encoding.Raw,
                                        serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def test_publisher_signatures(tmp_path: Path) -> None:
    publisher, stranger = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    trusted = (_public(publisher),)
    skills = tmp_path / "skills"
    assert install(_signed_copy(tmp_path, "good", publisher), skills, trusted).name == "demo"
    with pytest.raises(ToolError, match="not signed"):
        install(_signed_copy(tmp_path, "unsigned", None), skills, trusted)
    with pytest.raises(ToolError, match="no trusted publisher key"):
        install(_signed_copy(tmp_path, "stranger", stranger), skills, trusted)
    # Signed, then granted more than the publisher signed for: refused.
    widened = _signed_copy(tmp_path, "widened", publisher)
    raw = json.loads((widened / "skill.json").read_text())
    raw["capabilities"]["network"] = ["example.com"]
    (widened / "skill.json").write_text(json.dumps(raw))
    with pytest.raises(ToolError, match="no trusted publisher key"):
        install(widened, skills, trusted)
    # Without trusted keys, unsigned skills install as before.
    assert install(_signed_copy(tmp_path, "plain", None), tmp_path / "other").name == "demo"
    # The daemon checks again when it loads: a skill replaced on disk is refused.
    shutil.copyfile(tmp_path / "unsigned" / "skill.json", skills / "demo" / "skill.json")
    registry = ToolRegistry()
    [record] = register_skills(skills, registry, limits=Limits(), publisher_keys=trusted)
    assert record["state"] == "refused" and "not signed" in record["reason"]
    assert registry.get("skill.demo.add") is None


@pytest.mark.parametrize("change", ["schema", "export", "description", "params"])
def test_the_signature_covers_the_tools_and_their_schemas(tmp_path: Path, change: str) -> None:
    """A publisher's signed module cannot be re-pointed at another export or given a
    looser schema: any change to a tool after signing fails verification."""
    publisher = Ed25519PrivateKey.generate()
    trusted = (_public(publisher),)
    json_tool = {"name": "echo", "description": "Echo.", "export": "echo", "abi": "json",
                 "input_schema": {"type": "object", "properties": {"n": {"type": "integer",
                                                                        "maximum": 10}},
                                  "additionalProperties": False}}
    source = _signed_copy(tmp_path, "signed", publisher,
                          tools=[*read_manifest(EXAMPLE).tools,
                                 msgspec.convert(json_tool, SkillTool)])
    verify_signature(read_manifest(source), trusted)  # as signed: it verifies
    raw = json.loads((source / "skill.json").read_text())
    tool = raw["tools"][-1]
    if change == "schema":  # looser: the bound on n goes
        del tool["input_schema"]["properties"]["n"]["maximum"]
    elif change == "export":  # the same tool, served by another export of the module
        raw["tools"][0]["export"] = "sub"
    elif change == "description":
        tool["description"] = "Echo anything."
    else:  # one more argument than the publisher's tool takes
        raw["tools"][0]["params"] = [*raw["tools"][0]["params"], "c"]
    (source / "skill.json").write_text(json.dumps(raw))
    with pytest.raises(ToolError, match="no trusted publisher key"):
        install(source, tmp_path / "skills", trusted)


def test_an_old_scheme_signature_is_refused_with_how_to_fix_it(tmp_path: Path) -> None:
    publisher = Ed25519PrivateKey.generate()
    source = _signed_copy(tmp_path, "old", None)
    manifest = read_manifest(source)
    old = publisher.sign(legacy_signing_message(manifest))
    (source / "skill.json").write_bytes(msgspec.json.encode(msgspec.structs.replace(
        manifest, signature=base64.b64encode(old).decode())))
    with pytest.raises(ToolError, match=r"old scheme palyra\.skill\.v1.*sign it again"):
        install(source, tmp_path / "skills", (_public(publisher),))


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, body in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            archive.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def _zip(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, body in members.items():
            archive.writestr(name, body)
    return buffer.getvalue()


@pytest.fixture
def file_server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_install_from_a_url(tmp_path: Path, file_server: tuple[Path, str],
                            capfd: pytest.CaptureFixture[str]) -> None:
    root, base = file_server
    files = {name: (EXAMPLE / name).read_bytes() for name in ("skill.json", "add.wat")}
    (root / "demo.tar.gz").write_bytes(_tar_gz({f"demo-1.0.0/{n}": b for n, b in files.items()}))
    (root / "demo.zip").write_bytes(_zip(files))
    (root / "evil.tar.gz").write_bytes(_tar_gz({**files, "../escape.txt": b"x"}))
    for name in ("demo.tar.gz", "demo.zip"):
        skills = tmp_path / f"skills-{name}"
        assert palyra(["skills", "--skills-dir", str(skills), "install", f"{base}/{name}"]) == 0
        assert read_manifest(skills / "demo").skill_id == "demo@1.0.0"
    assert "installed demo@1.0.0" in capfd.readouterr().out
    skills = tmp_path / "skills-evil"
    assert palyra(["skills", "--skills-dir", str(skills), "install", f"{base}/evil.tar.gz"]) == 1
    assert "not a plain relative path" in capfd.readouterr().err
    assert not (tmp_path / "escape.txt").exists() and not skills.exists()
    assert palyra(["skills", "--skills-dir", str(skills), "install", f"{base}/none.zip"]) == 1
    assert "404" in capfd.readouterr().err


GET_ONE = """
(module
  (import "palyra" "http_get" (func $get (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "{url}")
  (func (export "get") (result f64)
    (f64.convert_i32_s (call $get (i32.const 64) (i32.const {length}) (i32.const 1024)
      (i32.const 64)))))
"""


async def test_http_get_connects_to_the_address_it_checked(
        tmp_path: Path, ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    # A rebinding name: the check's lookup says loopback (allowed here), any later
    # lookup says an unroutable address. The request must go where the check looked.
    seen: list[str] = []

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers["Host"])
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"pinned")

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    real = socket.getaddrinfo
    lookups: list[str] = []

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.test":
            return real(host, *args, **kwargs)
        lookups.append(host)
        address = "127.0.0.1" if len(lookups) == 1 else "10.255.255.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://rebind.test:{port}/x"
    directory = tmp_path / "skills" / "rebind"
    directory.mkdir(parents=True)
    module = GET_ONE.format(url=url, length=len(url))
    (directory / "get.wat").write_text(module)
    (directory / "skill.json").write_text(json.dumps({
        "name": "rebind", "version": "0.1.0", "module": "get.wat",
        "sha256": hashlib.sha256(module.encode()).hexdigest(),
        "tools": [{"name": "get", "description": "get", "export": "get", "params": []}],
        "capabilities": {"network": ["rebind.test"], "filesystem": []}}))
    registry = ToolRegistry()
    register_skills(tmp_path / "skills", registry, limits=Limits(),
                    fetch_allow=("127.0.0.0/8",))
    try:
        result = await registry.execute("skill.rebind.get", {}, ctx, timeout_s=20)
    finally:
        server.shutdown()
        server.server_close()
    assert _value(result) == float(len(b"pinned"))
    assert seen == [f"rebind.test:{port}"]  # the name travels in Host, the address was pinned


# The json ABI: a bump allocator at 1024; `echo` answers its own arguments,
# `garbage` answers bytes that are not JSON, `wild` points outside its memory.
JSON_ABI = """
(module
  (memory (export "memory") 1)
  (data (i32.const 16) "not json")
  (func (export "alloc") (param $len i32) (result i32) i32.const 1024)
  (func (export "echo") (param $ptr i32) (param $len i32) (result i64)
    (i64.or (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
            (i64.extend_i32_u (local.get $len))))
  (func (export "garbage") (param i32 i32) (result i64)
    (i64.or (i64.shl (i64.const 16) (i64.const 32)) (i64.const 8)))
  (func (export "wild") (param i32 i32) (result i64)
    (i64.or (i64.shl (i64.const 65000) (i64.const 32)) (i64.const 4096))))
"""
NOTE_SCHEMA = {"type": "object", "required": ["text"], "additionalProperties": False,
               "properties": {"text": {"type": "string"},
                              "tags": {"type": "array", "items": {"type": "string"}}}}


def make_json_skill(root: Path) -> Path:
    directory = root / "notes"
    directory.mkdir(parents=True)
    (directory / "json.wat").write_text(JSON_ABI)
    tools = [{"name": n, "description": n, "export": n, "abi": "json",
              "input_schema": NOTE_SCHEMA} for n in ("echo", "garbage", "wild")]
    (directory / "skill.json").write_text(json.dumps({
        "name": "notes", "version": "0.1.0", "module": "json.wat",
        "sha256": hashlib.sha256(JSON_ABI.encode()).hexdigest(), "tools": tools}))
    return directory


async def test_the_json_abi_passes_structured_arguments_and_answers(
        tmp_path: Path, ctx: ToolContext) -> None:
    make_json_skill(tmp_path / "skills")
    registry = _registry(tmp_path / "skills")
    assert registry.get("skill.notes.echo").json_schema() == NOTE_SCHEMA  # type: ignore[union-attr]
    arguments = {"text": "héllo ✓", "tags": ["a", "b"]}
    echoed = await registry.execute("skill.notes.echo", arguments, ctx)
    assert echoed.success, echoed.error
    assert msgspec.json.decode(echoed.output_json) == arguments
    wrong = await registry.execute("skill.notes.echo", {"tags": ["a"]}, ctx)
    assert not wrong.success and "'text' is a required property" in wrong.error
    garbage = await registry.execute("skill.notes.garbage", {"text": "x"}, ctx)
    assert not garbage.success and "not JSON" in garbage.error
    wild = await registry.execute("skill.notes.wild", {"text": "x"}, ctx)
    assert not wild.success and "outside its memory" in wild.error


def test_a_json_abi_tool_needs_a_valid_schema(tmp_path: Path) -> None:
    directory = make_json_skill(tmp_path / "skills")
    manifest = json.loads((directory / "skill.json").read_text())
    manifest["tools"][0]["input_schema"] = {"type": "no-such-type"}
    with pytest.raises(ManifestError, match="not a JSON Schema"):
        parse_manifest(json.dumps(manifest).encode())
    manifest["tools"][0] = {"name": "echo", "description": "e", "export": "echo", "abi": "json"}
    with pytest.raises(ManifestError, match="takes an input_schema"):
        parse_manifest(json.dumps(manifest).encode())
