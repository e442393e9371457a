"""Entry point of the ``palyra`` command.

``serve`` runs the daemon; ``chat``, ``runs``, ``sessions``, ``approvals``,
``tokens``, ``agents``, ``memory``, ``channels``, ``tasks``, ``incidents``,
``learning`` and ``usage`` talk gRPC to a running daemon; ``config show`` prints the
effective settings; ``journal`` works on a data dir directly
(``journal checkpoint`` and ``journal prune`` ask the running daemon first).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from palyra.cli import (
    _agents,
    _approvals,
    _channels,
    _chat,
    _config,
    _doctor,
    _incidents,
    _learning,
    _memory,
    _policy,
    _runs,
    _serve,
    _sessions,
    _skills,
    _tasks,
    _tokens,
    _usage,
)

# `palyra journal <cmd> ...` is delegated verbatim to the journal's own CLI.
_JOURNAL_COMMANDS = {
    "verify": "check a data dir or a bundle: hash chain and signatures",
    "export": "write the journal, or one session, as a bundle to verify offline",
    "checkpoint": "sign the chain head now (via the running daemon if any)",
    "prune": "retention now: old records become hash tombstones (via the daemon if any)",
    "traces": "a bundle's GenAI spans as OTLP/JSON (the ones the daemon traced)",
    "prove": "a C2SP tlog-proof of one event's record (via the daemon if any)",
    "verify-proof": "check a tlog-proof offline with the log's public key",
    "consistency": "check that a later signed checkpoint extends an earlier one",
}


def _journal_help() -> str:
    rows = "".join(f"  {name:<12}{text}\n" for name, text in _JOURNAL_COMMANDS.items())
    return ("usage: palyra journal SUBCOMMAND [options]\n\nWork on the hash-chained journal.\n\n"
            f"subcommands:\n{rows}\nEach subcommand has its own --help.\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps each subcommand and its help on one line.

    argparse sizes the help column without the extra indent it gives the
    subcommands of a group, so a name like ``approvals`` wrapped its help onto
    the next line; this widens the column by that indent.
    """

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            self._action_max_length += 2 * self._indent_increment


def _use_formatter(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = _HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _use_formatter(child)


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree (journal subcommands are parsed by their own module).

    A command group given without its subcommand prints its help (the
    subcommands, one line each) instead of an error.
    """
    parser = argparse.ArgumentParser(prog="palyra", description=__doc__)
    parser.set_defaults(handler=lambda args: _print_help(parser))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    _serve.add_parser(commands)
    _chat.add_parser(commands)
    _runs.add_parser(commands)
    _sessions.add_parser(commands)
    _approvals.add_parser(commands)
    _tokens.add_parser(commands)
    _agents.add_parser(commands)
    _memory.add_parser(commands)
    _channels.add_parser(commands)
    _tasks.add_parser(commands)
    _incidents.add_parser(commands)
    _learning.add_parser(commands)
    _config.add_parser(commands)
    _doctor.add_parser(commands)
    _policy.add_parser(commands)
    _skills.add_parser(commands)
    _usage.add_parser(commands)
    journal = commands.add_parser("journal", help="verify | export | checkpoint | prune | traces | prove | verify-proof | consistency",
                                  add_help=False)
    journal.add_argument("journal_args", nargs=argparse.REMAINDER)
    for name, choice in commands.choices.items():
        if name != "journal" and choice.get_default("handler") is None:
            choice.set_defaults(handler=lambda args, group=choice: _print_help(group))
    _use_formatter(parser)
    return parser


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


def _journal(argv: Sequence[str]) -> int:
    from palyra.cli import journal_cmd

    commands: dict[str, Callable[[Sequence[str]], int]] = {
        name: journal_cmd.COMMANDS[name] for name in _JOURNAL_COMMANDS
    }
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(_journal_help())
        return 0
    if argv[0] not in commands:
        print(f"palyra journal: unknown subcommand {argv[0]!r} (one of: "
              f"{', '.join(commands)})", file=sys.stderr)
        return 2
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
