"""Daemon configuration: frozen dataclasses per concern, layered TOML → env → flags."""

from palyra.config._coerce import build as build_section
from palyra.config._consistency import Contradiction, contradictions
from palyra.config._load import ENV_ALIASES, check_layer, config_layers, env_names, load_config
from palyra.config._model import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    AuthConfig,
    DaemonConfig,
    GrpcConfig,
    HttpConfig,
    LogConfig,
    PalyraConfig,
)
from palyra.config._sources import Setting, is_secret, settings_with_sources

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "ENV_ALIASES",
    "AuthConfig",
    "Contradiction",
    "DaemonConfig",
    "GrpcConfig",
    "HttpConfig",
    "LogConfig",
    "PalyraConfig",
    "Setting",
    "build_section",
    "check_layer",
    "config_layers",
    "contradictions",
    "env_names",
    "is_secret",
    "load_config",
    "settings_with_sources",
]
