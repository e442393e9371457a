"""``palyra skills install | list | enable | disable | quarantine | remove``.

Skills live in ``<data-dir>/skills`` (or ``[tools] skills_dir``); the daemon
loads the enabled ones when it starts, so a change takes effect at its next
start. ``install`` checks the manifest and the module's SHA-256 (and that it
compiles) before anything is copied.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import urllib.parse
from pathlib import Path

from palyra.cli._render import print_table
from palyra.cli.journal_cmd import default_data_dir
from palyra.core.errors import PalyraError

# palyra.tools.skills (Wasmtime, jsonschema) is imported by the handlers, not here:
# every `palyra` command, `serve` included, loads this module.

_STATE_OF_COMMAND = {"enable": "enabled", "disable": "disabled", "quarantine": "quarantined"}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``skills ...``."""
    skills = commands.add_parser("skills", help="install and manage WebAssembly skills")
    skills.add_argument("--skills-dir", type=Path, default=None,
                        help="the skills directory (default: <data-dir>/skills)")
    skills.add_argument("--data-dir", type=Path, default=None,
                        help="the daemon's data dir (default: $PALYRA_DATA_DIR or ./palyra-data)")
    def usage(_: argparse.Namespace) -> int:
        skills.print_help()
        return 2

    skills.set_defaults(handler=usage)
    sub = skills.add_subparsers(dest="skills_command", metavar="SUBCOMMAND", title="subcommands")
    add = sub.add_parser("install", help="install a skill: a directory (manifest + module), "
                                         "or the URL of a .tar.gz/.zip holding one")
    add.add_argument("source", metavar="DIR|URL")
    add.add_argument("--publisher-key", action="append", default=[], metavar="BASE64",
                     help="a trusted publisher's ed25519 public key (repeatable); with any, "
                          "the skill must be signed by one")
    add.set_defaults(handler=_install)
    listing = sub.add_parser("list", help="list installed skills and their states")
    listing.set_defaults(handler=_list)
    for command, state in _STATE_OF_COMMAND.items():
        change = sub.add_parser(command, help=f"mark a skill {state}")
        change.add_argument("name")
        change.set_defaults(handler=_change, state=state)
    remove = sub.add_parser("remove", help="delete an installed skill")
    remove.add_argument("name")
    remove.set_defaults(handler=_remove)


def _dir(args: argparse.Namespace) -> Path:
    if args.skills_dir is not None:
        return Path(args.skills_dir)
    return Path(args.data_dir or default_data_dir()) / "skills"


def _install(args: argparse.Namespace) -> int:
    from palyra.tools.skills import ManifestError, install
    from palyra.tools.skills.fetch import download, unpack

    try:
        if str(args.source).startswith(("https://", "http://")):
            with tempfile.TemporaryDirectory(prefix="palyra-skill-") as temp:
                name = urllib.parse.urlsplit(args.source).path
                source = unpack(name, download(args.source), Path(temp))
                manifest = install(source, _dir(args), tuple(args.publisher_key))
        else:
            manifest = install(Path(args.source), _dir(args), tuple(args.publisher_key))
    except (ManifestError, PalyraError, OSError) as exc:
        print(f"palyra skills install: {exc}", file=sys.stderr)
        return 1
    print(f"installed {manifest.skill_id} ({len(manifest.tools)} tools, sha256 "
          f"{manifest.sha256})")
    return 0


def _list(args: argparse.Namespace) -> int:
    from palyra.tools.skills import ManifestError, installed, read_manifest, state_of

    rows = []
    for directory in installed(_dir(args)):
        try:
            manifest = read_manifest(directory)
        except ManifestError as exc:
            rows.append([directory.name, "?", "broken", str(exc)])
            continue
        tools = ", ".join(f"skill.{manifest.name}.{t.name}" for t in manifest.tools)
        rows.append([manifest.name, manifest.version, state_of(directory), tools])
    print_table(rows, ["NAME", "VERSION", "STATE", "TOOLS"], out=sys.stdout)
    return 0


def _find(args: argparse.Namespace) -> Path | None:
    name = str(args.name)
    directory = _dir(args) / name
    if "/" in name or not (directory / "skill.json").is_file():
        print(f"palyra skills: no installed skill named {args.name!r}", file=sys.stderr)
        return None
    return directory


def _change(args: argparse.Namespace) -> int:
    from palyra.tools.skills import set_state

    directory = _find(args)
    if directory is None:
        return 1
    set_state(directory, args.state)
    print(f"{args.name}: {args.state} (the daemon applies it at its next start)")
    return 0


def _remove(args: argparse.Namespace) -> int:
    directory = _find(args)
    if directory is None:
        return 1
    shutil.rmtree(directory)
    print(f"{args.name}: removed")
    return 0
