"""Layer the configuration: defaults → TOML file → ``PALYRA_*`` env → CLI flags.

Each layer is a nested mapping ``{section: {field: value}}`` (root fields
under ``""``); later layers win field by field. The result is validated once,
into :class:`PalyraConfig`, and passed explicitly from then on.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from palyra.config._coerce import build, config_error
from palyra.config._consistency import contradictions
from palyra.config._model import PalyraConfig
from palyra.core.errors import PalyraError
from palyra.journal import JournalConfig, check_name, witnesses

_PREFIX = "PALYRA_"
# Short, documented names for the settings people set most often.
ENV_ALIASES: Mapping[str, tuple[str, str]] = {
    "PALYRA_ADMIN_TOKEN": ("auth", "admin_token"),
    "PALYRA_CONNECTOR_TOKENS": ("auth", "connector_tokens"),
}
# Env names that are not settings (read elsewhere, or the config path itself).
_NOT_SETTINGS = frozenset({"PALYRA_CONFIG"})

Layer = dict[str, dict[str, Any]]


def _sections() -> dict[str, type[Any]]:
    hints = typing.get_type_hints(PalyraConfig)
    return {f.name: hints[f.name] for f in dataclasses.fields(PalyraConfig)
            if dataclasses.is_dataclass(hints[f.name])}


def env_names() -> dict[str, tuple[str, str]]:
    """Every recognised env var → (section, field); root fields use section ``""``."""
    names: dict[str, tuple[str, str]] = dict(ENV_ALIASES)
    sections = _sections()
    for f in dataclasses.fields(PalyraConfig):
        if f.name not in sections:
            names[f"{_PREFIX}{f.name.upper()}"] = ("", f.name)
    for section, cls in sections.items():
        for f in dataclasses.fields(cls):
            names[f"{_PREFIX}{section.upper()}_{f.name.upper()}"] = (section, f.name)
    return names


def toml_layer(path: Path) -> Layer:
    """Read a TOML config file into a layer."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise config_error(str(path), "config file not found") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise config_error(str(path), str(exc)) from None
    sections = _sections()
    layer: Layer = {"": {}}
    for key, value in data.items():
        if key in sections:
            if not isinstance(value, dict):
                raise config_error(key, "expected a table")
            layer[key] = dict(value)
        else:
            layer[""][key] = value
    return layer


def env_layer(env: Mapping[str, str]) -> Layer:
    """Pick the ``PALYRA_*`` settings out of ``env``; unknown ``PALYRA_*`` names are errors."""
    known = env_names()
    layer: Layer = {}
    for name, value in env.items():
        if not name.startswith(_PREFIX) or name in _NOT_SETTINGS:
            continue
        target = known.get(name)
        if target is None:
            # Other packages may read their own PALYRA_* variables (e.g. test
            # knobs); ignore rather than refuse to start.
            continue
        section, field = target
        layer.setdefault(section, {})[field] = value
    return layer


def config_layers(
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[tuple[str, Layer]]:
    """The layers in the order they apply, each named by its source.

    Sources: ``file <path>``, ``env``, ``flag``. Every layer's values are
    checked on their own first, so a bad value in the file is reported even
    when the environment or a flag overrides it (a file that only works while
    overridden is a trap for the next start).

    Raises:
        PalyraError: ``CONFIG_INVALID`` naming the layer and the first bad setting.
    """
    env = env or {}
    if config_file is None and env.get("PALYRA_CONFIG"):
        config_file = Path(env["PALYRA_CONFIG"])
    layers: list[tuple[str, Layer]] = []
    if config_file is not None:
        layers.append((f"file {config_file}", toml_layer(config_file)))
    layers.append(("env", env_layer(env)))
    flag_layer: Layer = {}
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, field = dotted.rpartition(".")
        flag_layer.setdefault(section, {})[field] = value
    layers.append(("flag", flag_layer))
    for source, layer in layers:
        check_layer(source, layer)
    return layers


def check_layer(source: str, layer: Layer) -> None:
    """Coerce one layer's values alone; ``CONFIG_INVALID`` says which layer is wrong."""
    sections = _sections()
    try:
        for section, values in layer.items():
            if section == "":
                root = {k: v for k, v in values.items() if k not in sections}
                build(PalyraConfig, root)
            elif section not in sections:
                raise config_error(section, "unknown section")
            else:
                build(sections[section], values, f"{section}.")
    except PalyraError as exc:
        raise PalyraError(f"{source}: {exc.message}", code=exc.code,
                          details=exc.details) from None


def load_config(
    *,
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> PalyraConfig:
    """Build the configuration from its layers.

    Args:
        config_file: Optional TOML file (``--config`` or ``PALYRA_CONFIG``).
        env: The environment to read ``PALYRA_*`` settings from (pass ``os.environ``).
        overrides: CLI flags as dotted names, e.g. ``{"grpc.port": 0, "data_dir": "d"}``;
            ``None`` values mean "flag not given".

    Raises:
        PalyraError: ``CONFIG_INVALID`` naming the first bad setting.
    """
    env = env or {}
    if config_file is None and env.get("PALYRA_CONFIG"):
        config_file = Path(env["PALYRA_CONFIG"])
    layers = config_layers(config_file=config_file, env=env, overrides=overrides)
    merged: Layer = {}
    for _, layer in layers:
        for section, values in layer.items():
            merged.setdefault(section, {}).update(values)
    raw: dict[str, Any] = dict(merged.pop("", {}))
    for section, values in merged.items():
        if section not in _sections():
            raise config_error(section, "unknown section")
        raw[section] = values
    return validate(derive(build(PalyraConfig, raw), config_file))


def derive(config: PalyraConfig, config_file: Path | None) -> PalyraConfig:
    """Settings that follow from others, so a user states each thing once.

    * Policies live beside the config file (``<dir>/policies/*.cedar``) unless
      ``[policy] config_dir`` says otherwise.
    * One ``process_exec_enabled`` switch (in ``[tools]`` or ``[policy]``)
      registers ``process.run`` *and* lifts the policy's forbid on it; two
      switches that disagree would leave a tool that exists but can never run.
    """
    policy = config.policy
    if policy.config_dir is None and config_file is not None:
        policy = dataclasses.replace(policy, config_dir=config_file.resolve().parent)
    process_exec = policy.process_exec_enabled or config.tools.process_exec_enabled
    policy = dataclasses.replace(policy, process_exec_enabled=process_exec)
    tools = dataclasses.replace(config.tools, process_exec_enabled=process_exec)
    return dataclasses.replace(config, policy=policy, tools=tools)


def _check_tlog(journal: Any) -> None:
    """The transparency log's origin and witness keys (``tlog.note``'s rules)."""
    try:
        witnesses(journal)
    except ValueError as exc:
        raise config_error("journal.tlog_witnesses", str(exc)) from None
    try:
        if journal.tlog_origin:
            check_name(journal.tlog_origin)
    except ValueError as exc:
        raise config_error("journal.tlog_origin", str(exc)) from None


def _validate_backend(journal: JournalConfig) -> None:
    """The journal's backend settings (``docs/journal/postgres.md``)."""
    if journal.backend not in ("lmdb", "postgres"):
        raise config_error("journal.backend", 'must be "lmdb" or "postgres"')
    if journal.backend == "postgres" and not journal.dsn.startswith(
        ("postgresql://", "postgres://")
    ):
        raise config_error("journal.dsn", 'backend = "postgres" needs a dsn: '
                           '"postgresql://user@host:port/database"')
    if journal.pool_size < 1:
        raise config_error("journal.pool_size", "must be at least 1")
    if not 0.5 <= journal.lease_ttl_s <= 3600:
        raise config_error("journal.lease_ttl_s", "must be 0.5..3600 seconds")


def validate(config: PalyraConfig) -> PalyraConfig:
    """Cross-field and range checks the type coercion cannot express."""
    for name, port in (("grpc.port", config.grpc.port), ("http.port", config.http.port)):
        if not 0 <= port <= 65535:
            raise config_error(name, "must be 0..65535 (0 = ephemeral)")
    if config.grpc.port and config.grpc.port == config.http.port and (
        config.grpc.host == config.http.host
    ):
        raise config_error("http.port", "must differ from grpc.port")
    for name, size in (("http.max_request_bytes", config.http.max_request_bytes),
                       ("grpc.max_message_bytes", config.grpc.max_message_bytes)):
        if size <= 0:
            raise config_error(name, "must be positive")
    if config.http.sse_error_grace_s < 0 or config.http.sse_keepalive_s <= 0:
        raise config_error("http.sse_keepalive_s", "must be positive")
    journal = config.journal
    _check_tlog(journal)
    if journal.retention_max_age_days < 0:
        raise config_error("journal.retention_max_age_days", "must not be negative (0 = off)")
    if journal.retention_interval_s <= 0 or journal.retention_batch_records <= 0:
        raise config_error("journal.retention_interval_s", "retention_interval_s and "
                           "retention_batch_records must be positive")
    _validate_backend(journal)
    if config.daemon.shutdown_grace_s < 0:
        raise config_error("daemon.shutdown_grace_s", "must not be negative")
    for entry in config.auth.connector_tokens:
        if not entry.rpartition("=")[2]:
            raise config_error("auth.connector_tokens", "empty token")
    for clash in contradictions(config):
        raise config_error(clash.setting, clash.problem)
    return config
