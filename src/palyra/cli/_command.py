"""One shape for the subsystem commands: a gRPC call, then a table or ``--json``.

Each command is a coroutine ``(stubs, args) -> Shown``; this module opens the
channel, turns failures into one actionable line (``report_error``) and prints
the answer: an aligned table (or one line) for people, the proto3-JSON of the
answer's messages for scripts (``--json``, one document on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

import betterproto2

from palyra.cli._client import Stubs, add_connection_flags, connect, report_error
from palyra.cli._render import print_table
from palyra.core.protojson import encode_message

# A string: _SubParsersAction is not subscriptable at run time.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


@dataclass(frozen=True, slots=True)
class Shown:
    """What a command prints: ``data`` for ``--json``; ``rows`` under ``header``, or ``line``."""

    data: betterproto2.Message | Sequence[betterproto2.Message] | None
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    line: str = ""


Run = Callable[[Stubs, argparse.Namespace], Awaitable[Shown]]


def add_group(commands: SubParsers, name: str, help_text: str) -> SubParsers:
    """A command group; given without a subcommand it prints its subcommands."""
    group = commands.add_parser(name, help=help_text, description=help_text)
    return group.add_subparsers(dest=f"{name}_command", metavar="SUBCOMMAND",
                                title="subcommands")


def add_command(sub: SubParsers, name: str, help_text: str, run: Run,
                description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand calling ``run`` against the daemon; adds ``--json`` and the connection flags."""
    parser = sub.add_parser(name, help=help_text, description=description or help_text)
    parser.add_argument("--json", action="store_true",
                        help="print the answer as proto3 JSON (for scripts)")
    add_connection_flags(parser)
    parser.set_defaults(handler=lambda args: asyncio.run(_invoke(run, args)))
    return parser


def to_json(data: betterproto2.Message | Sequence[betterproto2.Message] | None) -> str:
    """The answer as one JSON document (a list stays a list)."""
    if data is None:
        return "null"
    if isinstance(data, betterproto2.Message):
        return json.dumps(encode_message(data), ensure_ascii=False, indent=2)
    return json.dumps([encode_message(m) for m in data], ensure_ascii=False, indent=2)


async def _invoke(run: Run, args: argparse.Namespace) -> int:
    try:
        async with connect(args) as stubs:
            shown = await run(stubs, args)
    except Exception as exc:
        return report_error(exc)
    if args.json:
        print(to_json(shown.data))
    elif shown.header:
        print_table(shown.rows, shown.header)
    if not args.json and shown.line:
        print(shown.line)
    return 0
