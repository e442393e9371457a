"""Daemon configuration: frozen dataclasses per concern, layered TOML → env → flags."""

from palyra.config._coerce import build as build_section
from palyra.config._load import ENV_ALIASES, env_names, load_config
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

__all__ = [
    "DEFAULT_GRPC_PORT",
    "DEFAULT_HTTP_PORT",
    "ENV_ALIASES",
    "AuthConfig",
    "DaemonConfig",
    "GrpcConfig",
    "HttpConfig",
    "LogConfig",
    "PalyraConfig",
    "build_section",
    "env_names",
    "load_config",
]
