"""Entry point of the ``palyra`` command.

``serve`` runs the daemon; ``chat``, ``runs``, ``sessions`` and ``approvals``
talk gRPC to a running daemon; ``journal`` works on a data dir directly
(``journal checkpoint`` asks the running daemon first).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from palyra.cli import _approvals, _chat, _runs, _serve, _sessions

# `palyra journal <cmd> ...` is delegated verbatim to the journal's own CLI.
_JOURNAL_COMMANDS = ("verify", "export", "checkpoint")


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree (journal subcommands are parsed by their own module)."""
    parser = argparse.ArgumentParser(prog="palyra", description=__doc__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _serve.add_parser(commands)
    _chat.add_parser(commands)
    _runs.add_parser(commands)
    _sessions.add_parser(commands)
    _approvals.add_parser(commands)
    journal = commands.add_parser("journal", help="verify | export | checkpoint the journal",
                                  add_help=False)
    journal.add_argument("journal_args", nargs=argparse.REMAINDER)
    return parser


def _journal(argv: Sequence[str]) -> int:
    from palyra.cli import journal_cmd

    commands: dict[str, Callable[[Sequence[str]], int]] = {
        name: getattr(journal_cmd, name) for name in _JOURNAL_COMMANDS
    }
    if not argv or argv[0] not in commands:
        print(f"usage: palyra journal {{{'|'.join(_JOURNAL_COMMANDS)}}} [options]",
              file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return commands[argv[0]](list(argv[1:]))


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``palyra``; returns the process exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["journal"]:
        return _journal(args_list[1:])
    args = build_parser().parse_args(args_list)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
