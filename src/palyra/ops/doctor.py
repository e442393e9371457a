"""``palyra doctor``: what a user gets wrong, checked one line at a time.

Each check is a function returning :class:`~palyra.ops.readiness.Check`; none
raises. The journal checks open the data dir read-only, so the doctor runs
beside a daemon. Endpoint checks wait at most ``timeout_s`` each.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from palyra.config import PalyraConfig
from palyra.core.errors import PalyraError
from palyra.journal import JournalConfig, JournalStore, verify_store
from palyra.ops.readiness import Check, map_check

CLOCK_SLACK_MS = 1000  # the wall clock may lag the journal's last event by this much


def config_check(path: Path | None, load: Callable[[], PalyraConfig]
                 ) -> tuple[Check, PalyraConfig | None]:
    """The layered config loads and validates; a bad setting is named with its file and line."""
    try:
        config = load()
    except PalyraError as exc:
        setting = str(exc.details.get("setting", ""))
        if "." not in setting:  # a section's own check names the key first: "max_turns must…"
            named = re.match(r"^invalid setting [^:]+: ([a-z_]+) ", exc.message)
            setting = f"{setting}.{named.group(1)}" if named and setting else setting
        where = _line_of(path, setting) if path is not None and setting else ""
        return Check("config", False, f"{where}{exc.message}"), None
    source = str(path) if path is not None else "defaults and PALYRA_* env"
    return Check("config", True, f"{source} loads, every value in range"), config


def _line_of(path: Path, setting: str) -> str:
    """``file:line: `` of ``setting`` (``section.key``) in a TOML file, or ``file: ``."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return f"{path}: "
    section, _, key = setting.rpartition(".")
    current = ""
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        header = re.match(r"^\[+\s*([^\]]+?)\s*\]+", text)
        if header:
            current = header.group(1)
        elif current == section and re.match(rf"^{re.escape(key)}\s*=", text):
            return f"{path}:{number}: "
    return f"{path}: "


def port_checks(config: PalyraConfig, daemon_pid: int | None) -> Iterator[Check]:
    """Each listening port is free, or held by this data dir's running daemon."""
    for name, host, port in (("grpc_port", config.grpc.host, config.grpc.port),
                             ("http_port", config.http.host, config.http.port)):
        if port == 0:
            yield Check(name, True, "0: an ephemeral port is chosen at start")
            continue
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError as exc:
                if daemon_pid is not None and exc.errno == errno.EADDRINUSE:
                    yield Check(name, True, f"{host}:{port} held by this data dir's daemon "
                                            f"(pid {daemon_pid})")
                else:
                    yield Check(name, False, f"{host}:{port} cannot be bound: {exc.strerror}")
                continue
        yield Check(name, True, f"{host}:{port} is free")


def data_dir_check(data_dir: Path) -> Check:
    """The data dir is a directory of this user's, mode 0700 (or will be created)."""
    if not data_dir.exists():
        parent = data_dir.resolve().parent
        if os.access(parent, os.W_OK):
            return Check("data_dir", True, f"{data_dir} does not exist yet; it will be created")
        return Check("data_dir", False, f"{data_dir} does not exist and {parent} is not writable")
    info = data_dir.stat()
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return Check("data_dir", False, f"{data_dir} is not a directory")
    if info.st_uid != os.getuid():
        return Check("data_dir", False, f"{data_dir} belongs to uid {info.st_uid}, "
                                        f"not to this user ({os.getuid()})")
    if mode & 0o077:
        return Check("data_dir", False, f"{data_dir} is mode {mode:04o}; it must be 0700 "
                                        f"(chmod 700 {data_dir})")
    for secret in ("admin.token", "journal/signing.key"):
        path = data_dir / secret
        if path.exists() and stat.S_IMODE(path.stat().st_mode) & 0o077:
            return Check("data_dir", False, f"{path} is readable by others; chmod 600 {path}")
    return Check("data_dir", True, f"{data_dir} is 0700 and this user's")


def disk_check(data_dir: Path, reserve: int = 256 * 1024 * 1024) -> Check:
    """Free disk where the data dir lives."""
    where = data_dir if data_dir.exists() else data_dir.resolve().parent
    free = shutil.disk_usage(where).free
    if free < reserve:
        return Check("disk", False, f"{free:,} bytes free under {where}; keep {reserve:,}")
    return Check("disk", True, f"{free:,} bytes free under {where}")


@contextlib.contextmanager
def _reader(data_dir: Path) -> Iterator[JournalStore | None]:
    try:
        store = JournalStore.open(data_dir, config=JournalConfig(readonly=True))
    except PalyraError:
        yield None
        return
    try:
        yield store
    finally:
        store.close()


def journal_checks(data_dir: Path, now_ms: Callable[[], int] = lambda: time.time_ns() // 10**6
                   ) -> Iterator[Check]:
    """Map usage, the clock against the journal's last event, and the chain verified."""
    with _reader(data_dir) as store:
        if store is None:
            yield Check("journal", True, "no journal yet: the daemon creates it at start")
            return
        head = store.head()
        yield map_check(store.map_used(), store.stats().map_size,
                        shutil.disk_usage(store.env.path).free)
        last = store.read_range(max(head.count - 1, 0), 1)
        last_ms = last[-1].ts_ms if last else 0
        now = now_ms()
        if last_ms and now + CLOCK_SLACK_MS < last_ms:
            yield Check("clock", False, f"the wall clock is {(last_ms - now) / 1000:.1f} s behind "
                                        "the journal's last event: fix the clock (NTP)")
        else:
            yield Check("clock", True, "not behind the journal's last event")
        try:
            report = verify_store(store)
        except PalyraError as exc:
            yield Check("journal_verify", False, exc.message)
            return
        if report.problem is not None:
            yield Check("journal_verify", False, f"{report.problem}")
        else:
            yield Check("journal_verify", True, f"{report.events:,} events, head "
                                                f"{report.head_hash[:16]} verifies")


def embedder_check(config: PalyraConfig, env: Mapping[str, str]) -> Check:
    """The configured embedder loads, and is the one configured (no silent hash fallback)."""
    from palyra.memory.factory import build_embedder

    try:
        embedder = build_embedder(config.memory, env)
    except (PalyraError, ValueError, OSError) as exc:
        return Check("embedder", False, f"{config.memory.embedder}: {exc}")
    space = str(getattr(embedder, "name", type(embedder).__name__))
    if config.memory.embedder == "wordllama" and "wordllama" not in space.lower():
        return Check("embedder", False, f"wordllama is configured but {space} loaded: memory "
                                        "search would run on the hash fallback")
    return Check("embedder", True, f"{config.memory.embedder} loads ({space})")


def loaded_embedder_check(configured: str, space: str) -> Check:
    """In the daemon: the embedder memory runs on is the configured one."""
    if configured == "wordllama" and "wordllama" not in space:
        return Check("embedder", False, f"wordllama is configured but {space} is in use: memory "
                                        "search runs on the hash fallback")
    return Check("embedder", True, f"{configured} in use ({space})")


def daemon_details(data_dir: Path, configured_embedder: str,
                   space: Callable[[], str]) -> list[Check]:
    """The doctor's checks cheap enough for every operator ``GetHealth``."""
    return [data_dir_check(data_dir), disk_check(data_dir),
            loaded_embedder_check(configured_embedder, space())]


def policy_check(config: PalyraConfig) -> Check:
    """The Cedar policy set (shipped defaults and ``policies/*.cedar``) loads."""
    from palyra.policy import PolicyGate

    try:
        gate = PolicyGate.load(config.policy)
    except PalyraError as exc:
        return Check("policy", False, exc.message)
    return Check("policy", True, f"policy set {gate.policy_hash[:12]} loads")


def endpoint_checks(config: PalyraConfig, timeout_s: float) -> Iterator[Check]:
    """Each configured remote endpoint answers HTTP (any status) within ``timeout_s``."""
    for name, url in _endpoints(config):
        try:
            with httpx.Client(timeout=timeout_s) as client:
                answer = client.get(url)
        except httpx.HTTPError as exc:
            yield Check(name, False, f"{url} did not answer within {timeout_s:g} s: "
                                     f"{type(exc).__name__}")
            continue
        yield Check(name, True, f"{url} answers (HTTP {answer.status_code})")


def _endpoints(config: PalyraConfig) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if config.provider.kind != "scripted" and config.provider.base_url:
        found.append((f"provider {config.provider.kind}", config.provider.base_url))
    if config.memory.embedder == "openai":
        found.append(("embedder endpoint", config.memory.openai.base_url))
    if config.tracing.enabled and config.tracing.otlp_endpoint:
        found.append(("otlp endpoint", config.tracing.otlp_endpoint))
    found.extend(_channel_urls(config.channels))
    return found


def _channel_urls(channels: Any) -> list[tuple[str, str]]:
    """Every ``*url`` setting under ``[channels]`` (API bases, reply URLs), by its path."""
    found: list[tuple[str, str]] = []

    def walk(node: Any, path: str, depth: int) -> None:
        if depth > 4:
            return
        items: list[tuple[str, Any]]
        if isinstance(node, Mapping):
            items = [(str(k), v) for k, v in node.items()]
        elif hasattr(node, "__dataclass_fields__"):
            items = [(k, getattr(node, k)) for k in node.__dataclass_fields__]
        else:
            return
        for key, value in items:
            if isinstance(value, str) and key.endswith("url") and value.startswith("http"):
                found.append((f"channel {path}{key}", value))
            else:
                walk(value, f"{path}{key}.", depth + 1)

    walk(channels, "", 0)
    return found
