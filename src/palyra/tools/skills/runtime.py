"""Running skill modules with Wasmtime: fuel, a memory cap, WASI preopens only.

Every call gets a fresh store and instance: no state survives between calls, and
one call's memory cannot hold another's data. Limits per call:

* **CPU**: fuel (``fuel`` units; one is about one instruction). A module that
  loops forever traps with "all fuel consumed".
* **time**: an epoch deadline of ``wall_s`` (the tool's timeout, see
  ``epochs``): a module that spends its time in host calls, which use no fuel,
  traps at its next instruction past the deadline, and ``palyra.http_get``
  bounds each request by the time left.
* **memory**: the store's limit on linear memory; ``memory.grow`` past it fails
  (a module that treats that as fatal traps), and so does instantiating a
  module whose initial memory is larger.
* **no ambient authority**: WASI gets no environment, no arguments, no stdio and
  only the directories the manifest asks for, each a path inside the workspace
  (opened under its own name). The network is reachable only through the
  ``palyra.http_get`` host function, which refuses hosts the manifest does not
  name and addresses ``http.fetch`` refuses (loopback, private, metadata, ...).

Refusals are returned to the module as negative codes and recorded in the
call's facts (``skill.refused``), so they are on the tape.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import socket
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import msgspec
import wasmtime
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from palyra.core.canonical import canonical_json
from palyra.tools._netguard import Network, refusal, via_address
from palyra.tools._spec import ToolError
from palyra.tools._workspace import resolve_in_workspace
from palyra.tools.skills.epochs import EpochClock
from palyra.tools.skills.manifest import (
    LEGACY_SCHEME,
    SIGNING_SCHEME,
    SkillManifest,
    SkillTool,
    legacy_signing_message,
    signing_message,
)

HTTP_NOT_GRANTED = -1
HTTP_ADDRESS_REFUSED = -2
HTTP_FAILED = -3
HTTP_TIMEOUT_S = 10.0
# The largest json ABI answer read back from a module (the registry's output cap
# then applies to what the model sees).
MAX_JSON_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Per-call limits of every skill."""

    fuel: int = 50_000_000
    memory_bytes: int = 64 * 1024 * 1024
    wall_s: float = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedSkill:
    """A verified, compiled skill."""

    manifest: SkillManifest
    engine: wasmtime.Engine
    module: wasmtime.Module
    module_sha256: str
    # Built once per skill (defining WASI costs more than a small call): every
    # call instantiates through it in a fresh store.
    linker: wasmtime.Linker
    uses_wasi: bool
    # Shared by every skill of the engine: it advances the engine's one epoch.
    clock: EpochClock


def engine() -> wasmtime.Engine:
    """The Wasmtime engine skills run on (fuel metering and epoch interruption on)."""
    config = wasmtime.Config()
    config.consume_fuel = True
    config.epoch_interruption = True
    return wasmtime.Engine(config)


def verify_signature(manifest: SkillManifest, publisher_keys: tuple[str, ...]) -> None:
    """With trusted publisher keys (base64 raw ed25519 public keys), require the
    manifest's signature to verify under one of them; without any, accept.

    Raises:
        ToolError: No signature, or none of the keys verifies it.
    """
    if not publisher_keys:
        return
    if not manifest.signature:
        raise ToolError(f"skill {manifest.skill_id} is not signed, and publisher keys are "
                        "configured")
    try:
        signature = base64.b64decode(manifest.signature, validate=True)
    except (binascii.Error, ValueError):
        raise ToolError(f"skill {manifest.skill_id}: the signature is not base64") from None
    if _verified(signature, signing_message(manifest), publisher_keys):
        return
    if _verified(signature, legacy_signing_message(manifest), publisher_keys):
        raise ToolError(f"skill {manifest.skill_id} is signed with the old scheme "
                        f"{LEGACY_SCHEME}, which does not cover its tools or their schemas; "
                        f"its publisher must sign it again ({SIGNING_SCHEME}: the whole "
                        "manifest but its signature, see README \"Signing a skill\")")
    raise ToolError(f"skill {manifest.skill_id}: no trusted publisher key verifies its signature")


def _verified(signature: bytes, message: bytes, publisher_keys: tuple[str, ...]) -> bool:
    for key in publisher_keys:
        try:
            Ed25519PublicKey.from_public_bytes(base64.b64decode(key)).verify(signature, message)
        except (InvalidSignature, ValueError, binascii.Error):
            continue
        return True
    return False


def load(engine: wasmtime.Engine, directory: Path, manifest: SkillManifest,
         publisher_keys: tuple[str, ...] = (), clock: EpochClock | None = None) -> LoadedSkill:
    """Check the signature (when publisher keys are trusted) and the module's
    SHA-256 against the manifest, then compile it. ``clock`` is the engine's
    epoch clock (one per engine: pass the same to every skill loaded on it).

    Raises:
        ToolError: Unsigned or badly signed, the digest differs, or the module
            does not compile.
    """
    verify_signature(manifest, publisher_keys)
    raw = (directory / manifest.module).read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != manifest.sha256:
        raise ToolError(f"skill {manifest.skill_id}: module SHA-256 {digest} does not match "
                        f"the manifest's {manifest.sha256}")
    try:
        binary = wasmtime.wat2wasm(raw.decode()) if manifest.module.endswith(".wat") else raw
        module = wasmtime.Module(engine, bytes(binary))
    except (wasmtime.WasmtimeError, UnicodeDecodeError) as exc:
        raise ToolError(f"skill {manifest.skill_id}: the module does not compile: {exc}") from exc
    uses_wasi = any(i.module.startswith("wasi") for i in module.imports)
    return LoadedSkill(manifest, engine, module, digest, _linker(engine), uses_wasi,
                       clock or EpochClock(engine))


# The call running on this thread: the host function finds its grants here
# (a linker's functions are shared by every store it instantiates into).
_CURRENT = threading.local()


def _http_get(caller: wasmtime.Caller, url_ptr: int, url_len: int, out_ptr: int,
              out_cap: int) -> int:
    call: _Call = _CURRENT.call
    return call.http_get(caller, url_ptr, url_len, out_ptr, out_cap)


def _linker(engine: wasmtime.Engine) -> wasmtime.Linker:
    linker = wasmtime.Linker(engine)
    linker.define_wasi()
    i32 = wasmtime.ValType.i32()
    linker.define_func("palyra", "http_get", wasmtime.FuncType([i32] * 4, [i32]), _http_get,
                       access_caller=True)
    return linker


class _Call:
    """One call's host-side state: its deadline (``time.monotonic``) and what it was refused."""

    def __init__(self, skill: LoadedSkill, allow: tuple[Network, ...], deadline: float) -> None:
        self.skill = skill
        self.allow = allow
        self.deadline = deadline
        self.refused: list[str] = []

    def http_get(self, caller: wasmtime.Caller, url_ptr: int, url_len: int, out_ptr: int,
                 out_cap: int) -> int:
        memory = caller["memory"]
        assert isinstance(memory, wasmtime.Memory)
        url = bytes(memory.read(caller, url_ptr, url_ptr + url_len)).decode("utf-8", "replace")
        parts = urllib.parse.urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or host not in \
                self.skill.manifest.capabilities.network:
            self.refused.append(f"host {host or url!r} not granted")
            return HTTP_NOT_GRANTED
        port = parts.port or (443 if parts.scheme == "https" else 80)
        if self.deadline - time.monotonic() <= 0:
            self.refused.append(f"host {host!r}: the call's deadline has passed")
            return HTTP_FAILED
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            target = httpx.URL(url)
        except (OSError, httpx.InvalidURL):
            return HTTP_FAILED
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            why = refusal(address, self.allow)
            if why:
                self.refused.append(f"host {host!r}: {why}")
                return HTTP_ADDRESS_REFUSED
        if not addresses:
            return HTTP_FAILED
        # Sent to the address just checked (Host and TLS name kept): a second
        # DNS answer cannot point the request somewhere the check never saw.
        pinned, headers, extensions = via_address(target, addresses[0])
        body = self._read(pinned, headers, extensions, max(0, out_cap))
        if body is None:
            return HTTP_FAILED
        memory.write(caller, body, out_ptr)
        return len(body)

    def _read(self, url: httpx.URL, headers: dict[str, str], extensions: dict[str, Any],
              cap: int) -> bytes | None:
        """The body's first ``cap`` bytes, or ``None`` when the request failed or the
        call's deadline passed first (a body is streamed: never more is held)."""
        timeout = min(HTTP_TIMEOUT_S, self.deadline - time.monotonic())
        if timeout <= 0:
            return None
        body = bytearray()
        try:
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                response = client.send(client.build_request(
                    "GET", url, headers=headers, extensions=extensions), stream=True)
                try:
                    for chunk in response.iter_bytes():
                        body += chunk[:cap - len(body)]
                        if len(body) >= cap:
                            break
                        if time.monotonic() >= self.deadline:  # a server trickling bytes
                            self.refused.append("the call's deadline passed mid-body")
                            return None
                finally:
                    response.close()
        except httpx.HTTPError:
            return None
        return bytes(body)


def _instance(store: wasmtime.Store, skill: LoadedSkill, workspace: Path) -> wasmtime.Instance:
    if skill.uses_wasi:
        # Nothing inherited: no environment, arguments or stdio; only the grants.
        wasi = wasmtime.WasiConfig()
        for path in skill.manifest.capabilities.filesystem:
            target = resolve_in_workspace(workspace, path)
            target.mkdir(parents=True, exist_ok=True)
            wasi.preopen_dir(str(target), path)
        store.set_wasi(wasi)
    return skill.linker.instantiate(store, skill.module)


def run(skill: LoadedSkill, tool: SkillTool, arguments: dict[str, Any], workspace: Path,
        limits: Limits, allow: tuple[Network, ...] = (), *, ticking: bool = True
        ) -> tuple[Any, dict[str, str]]:
    """Run one tool call (blocking: call it from a worker thread).

    ``ticking=False`` leaves the epoch clock alone: only for a module that can
    make no call that blocks (no WASI, no granted host), whose fuel bounds its time.

    Returns:
        The output value and the call's facts.

    Raises:
        ToolError: A trap (fuel, memory, ``unreachable``) or a bad export; its
            facts say which limit stopped it.
    """
    call = _Call(skill, allow, time.monotonic() + limits.wall_s)
    store = wasmtime.Store(skill.engine)
    store.set_fuel(limits.fuel)
    store.set_limits(memory_size=limits.memory_bytes)
    store.set_epoch_deadline(skill.clock.deadline_ticks(limits.wall_s))
    facts = {"skill.id": skill.manifest.skill_id, "skill.module_sha256": skill.module_sha256}

    instance: wasmtime.Instance | None = None

    def done(stopped: bool = False) -> dict[str, str]:
        used = limits.fuel - store.get_fuel()
        out = {**facts, "skill.fuel_used": str(used)}
        if stopped:  # the limits it ran under, beside where it stood
            out["skill.fuel_limit"] = str(limits.fuel)
            out["skill.memory_limit"] = str(limits.memory_bytes)
            out["skill.deadline_s"] = f"{limits.wall_s:g}"
        if stopped and instance is not None:
            exports = instance.exports(store)
            memories = [m for m in (exports[name] for name in exports)
                        if isinstance(m, wasmtime.Memory)]
            out["skill.memory_bytes"] = str(sum(m.data_len(store) for m in memories))
        if call.refused:
            out["skill.refused"] = "; ".join(call.refused)
        return out

    _CURRENT.call = call
    try:
        with skill.clock.ticking() if ticking else contextlib.nullcontext():
            instance = _instance(store, skill, workspace)
            export = instance.exports(store).get(tool.export)
            if not isinstance(export, wasmtime.Func):
                raise ToolError(f"skill {skill.manifest.skill_id} has no function "
                                f"{tool.export!r}")
            if tool.abi == "json":
                return _call_json(store, instance, skill, export, arguments), done()
            value = export(store, *(float(arguments[p]) for p in tool.params))
    except wasmtime.Trap as trap:
        # A memory.grow past the cap fails (returns -1); a module that cannot go
        # on without the memory traps, and skill.memory_bytes shows where it stood.
        stopped = _STOPS.get(trap.trap_code, "trap") if trap.trap_code is not None else "trap"
        raise ToolError(f"skill {skill.manifest.skill_id} stopped: {_first_line(trap)}",
                        facts={**done(True), "skill.stopped": stopped}) from trap
    except wasmtime.WasmtimeError as exc:
        # e.g. an initial memory over the cap: instantiation fails.
        raise ToolError(f"skill {skill.manifest.skill_id} could not run: {_first_line(exc)}",
                        facts={**done(True), "skill.stopped": "error"}) from exc
    finally:
        _CURRENT.call = None
    return {"result": value}, done()


# What stopped a trapped call, as its facts say.
_STOPS = {wasmtime.TrapCode.OUT_OF_FUEL: "fuel", wasmtime.TrapCode.INTERRUPT: "deadline"}


def _call_json(store: wasmtime.Store, instance: wasmtime.Instance, skill: LoadedSkill,
               export: wasmtime.Func, arguments: dict[str, Any]) -> Any:
    """The json ABI: arguments written through the module's ``alloc``, its answer
    read back from ``memory`` (at most ``MAX_JSON_BYTES``) and decoded."""
    exports = instance.exports(store)
    alloc, memory = exports.get("alloc"), exports.get("memory")
    name = skill.manifest.skill_id
    if not isinstance(alloc, wasmtime.Func) or not isinstance(memory, wasmtime.Memory):
        raise ToolError(f"skill {name} uses the json ABI but exports no alloc and memory")
    data = canonical_json(arguments)
    pointer = alloc(store, len(data))
    if not isinstance(pointer, int) or pointer < 0 or \
            pointer + len(data) > memory.data_len(store):
        raise ToolError(f"skill {name}: alloc gave no room for {len(data)} bytes")
    memory.write(store, data, pointer)
    packed = export(store, pointer, len(data))
    if not isinstance(packed, int):
        raise ToolError(f"skill {name}: a json ABI export must return an i64")
    start, length = (packed >> 32) & 0xFFFFFFFF, packed & 0xFFFFFFFF
    if length > MAX_JSON_BYTES or start + length > memory.data_len(store):
        raise ToolError(f"skill {name} answered {length} bytes at {start}: outside its "
                        f"memory or over {MAX_JSON_BYTES} bytes")
    try:
        return msgspec.json.decode(bytes(memory.read(store, start, start + length)))
    except msgspec.DecodeError as exc:
        raise ToolError(f"skill {name} answered something that is not JSON: {exc}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    cause = text.split("Caused by:", 1)[-1].strip()
    return cause.splitlines()[0] if cause else text.splitlines()[0]
