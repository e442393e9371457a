"""``palyra config show``: the effective configuration, each value with its source.

Reads the same layers ``palyra serve`` would (``--config`` or
``$PALYRA_CONFIG``, ``PALYRA_*`` env, the settings flags) without starting
anything; secrets are shown only as set or unset.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from palyra.cli._serve import FLAG_SETTINGS, add_config_flags, overrides
from palyra.config import (
    PalyraConfig,
    Setting,
    config_layers,
    env_names,
    load_config,
    settings_with_sources,
)
from palyra.core.errors import PalyraError


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the ``config`` group."""
    group = commands.add_parser("config", help="show the effective configuration")
    sub = group.add_subparsers(dest="config_command", metavar="SUBCOMMAND", title="subcommands")
    show = sub.add_parser(
        "show", help="every setting with its value and source (default, file, env, flag)",
        description="Print the configuration `palyra serve` would run with (same flags), "
                    "each setting with where its value comes from.")
    add_config_flags(show)
    show.add_argument("--json", action="store_true",
                      help="a JSON list of {name, value, source}")
    show.set_defaults(handler=_show)


def _describe(settings: list[Setting]) -> list[Setting]:
    # Name the exact variable or flag, so the user knows what to change.
    by_setting = {".".join(filter(None, target)): name for name, target in env_names().items()}
    flags = {setting: "--" + flag.replace("_", "-") for flag, setting in FLAG_SETTINGS.items()}
    described = []
    for s in settings:
        source = s.source
        if source == "env" and s.name in by_setting:
            source = f"env {by_setting[s.name]}"
        elif source == "flag" and s.name in flags:
            source = f"flag {flags[s.name]}"
        described.append(Setting(s.name, s.value, source))
    return described


def _show(args: argparse.Namespace) -> int:
    try:
        config: PalyraConfig = load_config(config_file=args.config, env=os.environ,
                                           overrides=overrides(args))
        layers = config_layers(config_file=args.config, env=os.environ,
                               overrides=overrides(args))
    except PalyraError as exc:
        print(f"palyra config show: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 2
    settings = _describe(settings_with_sources(config, layers))
    if args.json:
        print(json.dumps([{"name": s.name, "value": s.value, "source": s.source}
                          for s in settings], indent=2, default=str))
        return 0
    width = max(len(s.name) for s in settings)
    for s in settings:
        value = json.dumps(s.value, default=str, ensure_ascii=False)
        print(f"{s.name:<{width}}  {value}  ({s.source})")
    return 0
