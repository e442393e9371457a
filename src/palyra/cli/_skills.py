"""``palyra skills install | list | enable | disable | quarantine | remove``.

Skills live in ``<data-dir>/skills`` (or ``[tools] skills_dir``). ``install``
checks the manifest and the module's SHA-256 (and signature, and that it
compiles) before anything is copied. Every change is then recorded on the
journal: a daemon running on the data dir is asked to reload its skills
(``ReloadSkills``: it loads the change at once and journals it under the
caller's principal); with none running, the CLI journals the change itself and
the daemon loads the skills when it starts.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

from grpclib.client import Channel
from grpclib.exceptions import GRPCError
from palyra_gen.palyra import v1

from palyra.cli._checkpoint import DAEMON_TIMEOUT_S, DaemonRefused, daemon_else_data_dir
from palyra.cli._client import Target, _login
from palyra.cli._render import print_table
from palyra.cli.journal_cmd import default_data_dir
from palyra.core.errors import PalyraError
from palyra.journal import EventDraft, JournalStore

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
    return _record(args, {"skill": manifest.name, "change": "installed", "state": "enabled",
                          "skill_id": manifest.skill_id, "module_sha256": manifest.sha256})


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
    print(f"{args.name}: {args.state}")
    return _record(args, _change_of(directory, args.state, args.state))


def _remove(args: argparse.Namespace) -> int:
    directory = _find(args)
    if directory is None:
        return 1
    change = _change_of(directory, "removed", "removed")
    shutil.rmtree(directory)
    print(f"{args.name}: removed")
    return _record(args, change)


def _change_of(directory: Path, change: str, state: str) -> dict[str, Any]:
    from palyra.tools.skills import ManifestError, read_manifest

    record: dict[str, Any] = {"skill": directory.name, "change": change, "state": state,
                              "skill_id": "", "module_sha256": ""}
    try:
        manifest = read_manifest(directory)
    except ManifestError:
        return record
    return {**record, "skill_id": manifest.skill_id, "module_sha256": manifest.sha256}


def _record(args: argparse.Namespace, offline: dict[str, Any]) -> int:
    """Have the change loaded and journaled: by the running daemon, else here."""
    data_dir = Path(args.data_dir or default_data_dir())
    if not data_dir.is_dir():
        print(f"not journaled: no data dir at {data_dir} (a daemon started on it journals "
              "the skills it loads)")
        return 0

    async def via_daemon(target: Target) -> tuple[str | None, str]:
        return await _reload(target)

    def on_data_dir() -> str:
        store = JournalStore.open(data_dir)
        principal = f"admin:{_login()}"
        try:
            [stored] = asyncio.run(store.append([EventDraft(
                kind="skill.changed", actor=principal, principal=principal, payload=offline)]))
        finally:
            store.close()
        return (f"journaled at position {stored.position} (no daemon running: it loads "
                "the skills when it starts)")

    said = daemon_else_data_dir(data_dir, via_daemon, on_data_dir, "skills change")
    if said is None:
        return 1
    print(said)
    return 0


async def _reload(target: Target) -> tuple[str | None, str]:
    """The daemon's ReloadSkills, said in a line, or ``(None, why it did not answer)``."""
    address = f"{target.host}:{target.port}"
    channel = Channel(target.host, target.port)
    try:
        stub = v1.GatewayServiceStub(channel, metadata=target.metadata)
        async with asyncio.timeout(DAEMON_TIMEOUT_S):
            reply = await stub.reload_skills(v1.ReloadSkillsRequest())
    except GRPCError as exc:
        raise DaemonRefused(f"the daemon at {address} refused to reload its skills: "
                            f"{exc.status.name}: {exc.message}") from exc
    except OSError as exc:  # refused connection, timeout
        return None, f"the daemon at {address} did not answer ({exc or type(exc).__name__})"
    finally:
        channel.close()
    if not reply.changes:
        return f"the daemon at {address} already runs this (nothing changed)", ""
    changed = ", ".join(f"{c.name} {c.change}" for c in reply.changes)
    return (f"the daemon at {address} loaded it: {changed} (journal position "
            f"{reply.journal_position})"), ""
