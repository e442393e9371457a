"""``palyra journal verify|export|checkpoint|prune|prove|verify-proof|consistency``.

``verify`` and ``export`` open the data dir read-only, so they work while the
daemon runs; ``checkpoint`` needs the writer, so it asks the running daemon
first (``palyra.cli._checkpoint``), and so does ``prune`` (``palyra.cli._prune``). Each command takes argv-like arguments
(without the ``journal <command>`` prefix) and returns the process exit code:
0 intact / done, 1 tampered, 2 could not run (bad usage, no journal, data dir
locked).

On a terminal, ``verify`` and ``export`` show a progress line on stderr every
``PROGRESS_EVERY`` events and erase it when done; piped or captured stderr gets
nothing, and stdout is the same either way.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from palyra.core.errors import PalyraError
from palyra.journal import export_bundle, verify_bundle, verify_store

EXIT_OK = 0
EXIT_TAMPERED = 1
EXIT_ERROR = 2
PROGRESS_EVERY = 10_000


class _Progress:
    """``verify: 120,000 events (48,000/s)`` redrawn in place on a TTY stderr."""

    def __init__(self, label: str, out: TextIO | None = None) -> None:
        self._label = label
        self._out = out if out is not None else sys.stderr
        self._started = time.monotonic()
        self._next = PROGRESS_EVERY
        self._shown = False

    def callback(self) -> Callable[[int], None] | None:
        """The per-position callback, or ``None`` (no overhead) when stderr is not a TTY."""
        isatty = getattr(self._out, "isatty", None)
        return self._tick if isatty is not None and isatty() else None

    def _tick(self, position: int) -> None:
        if position < self._next:
            return
        self._next = position + PROGRESS_EVERY
        elapsed = max(time.monotonic() - self._started, 1e-9)
        self._out.write(f"\r{self._label}: {position:,} events ({position / elapsed:,.0f}/s)")
        self._out.flush()
        self._shown = True

    def clear(self) -> None:
        """Erase the line before the result is printed."""
        if self._shown:
            self._out.write("\r\033[K")
            self._out.flush()
            self._shown = False


def default_data_dir() -> Path:
    """``$PALYRA_DATA_DIR`` or ``./palyra-data``."""
    return Path(os.environ.get("PALYRA_DATA_DIR", "palyra-data"))


def _parser(prog: str, description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"palyra journal {prog}", description=description)
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data dir (default $PALYRA_DATA_DIR or ./palyra-data)",
    )
    return parser


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace | int:
    try:
        return parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse exits on --help and on usage errors
        return int(exc.code) if isinstance(exc.code, int) else EXIT_ERROR


def _fail(error: BaseException) -> int:
    message = error.message if isinstance(error, PalyraError) else str(error)
    code = f"{error.code.value}: " if isinstance(error, PalyraError) else ""
    print(f"ERROR {code}{message}", file=sys.stderr)
    return EXIT_ERROR


def _positive(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text}")
    return number


def verify(argv: Sequence[str]) -> int:
    """Verify a live data dir (opened read-only) or, with ``--bundle``, an exported bundle."""
    parser = _parser("verify", "Check every hash link and signed checkpoint of the journal.")
    parser.add_argument("--bundle", type=Path, help="verify this exported bundle instead")
    parser.add_argument(
        "--public-key",
        action="append",
        default=[],
        metavar="HEX",
        help="only accept checkpoints signed by this ed25519 key (repeatable)",
    )
    parser.add_argument(
        "--jobs",
        type=_positive,
        default=os.cpu_count() or 1,
        metavar="N",
        help="processes to check a data dir's journal with (default: the machine's cores, "
             "%(default)s; journals of under 65,536 records are checked by one)",
    )
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    try:
        keys = [bytes.fromhex(k) for k in args.public_key]
    except ValueError:
        print("ERROR --public-key must be hex", file=sys.stderr)
        return EXIT_ERROR
    if args.bundle is not None and _is_session_proofs(args.bundle):
        return _verify_session_proofs(args.bundle, keys)
    progress = _Progress("verify")
    try:
        if args.bundle is not None:
            report = verify_bundle(args.bundle, trusted_keys=keys, progress=progress.callback())
        else:
            report = verify_store(args.data_dir or default_data_dir(), trusted_keys=keys,
                                  progress=progress.callback(), jobs=args.jobs)
    except (PalyraError, OSError) as exc:
        progress.clear()
        return _fail(exc)
    progress.clear()
    print(report.summary())
    if not report.ok:
        print(
            f"verified intact up to position {report.head_position} "
            f"({report.events} events, {report.checkpoints} checkpoints)"
        )
        return EXIT_TAMPERED
    return EXIT_OK


def _is_session_proofs(path: Path) -> bool:
    """A session export (``palyra.journal.session-proofs``), not a bundle: its first line says."""
    try:
        with path.open("rb") as handle:
            first = handle.readline(4096)
    except OSError:
        return False  # verify_bundle reports it
    return b'"format":"palyra.journal.session-proofs"' in first


def _verify_session_proofs(path: Path, keys: Sequence[bytes]) -> int:
    from palyra.cli._session_export import verify_session_file

    try:
        ok, summary = verify_session_file(path, keys)
    except OSError as exc:
        return _fail(exc)
    print(summary)
    return EXIT_OK if ok else EXIT_TAMPERED


def export(argv: Sequence[str]) -> int:
    """Write a self-contained NDJSON bundle of the journal or of one session."""
    parser = _parser(
        "export", "Export a bundle that `palyra journal verify --bundle` checks offline."
    )
    parser.add_argument("--out", type=Path, required=True, help="bundle file to write")
    parser.add_argument("--session", default=None,
                        help="only this session: its records with their inclusion proofs under "
                             "the transparency log's signed checkpoint (grows with the session, "
                             "not the journal)")
    parser.add_argument("--links", action="store_true",
                        help="with --session: the older session bundle instead, the session's "
                             "events as JSON lines and a link line for every other position "
                             "(grows with the journal; what `journal traces` reads)")
    parser.add_argument("--proofs", action="store_true", help=argparse.SUPPRESS)  # the default
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if args.session is None and (args.links or args.proofs):
        print("ERROR --links and --proofs need --session", file=sys.stderr)
        return EXIT_ERROR
    if args.session is not None and not args.links:
        return _export_proofs(args)
    progress = _Progress("export")
    try:
        summary = export_bundle(
            args.data_dir or default_data_dir(), args.out, session_id=args.session,
            progress=progress.callback(),
        )
    except (PalyraError, OSError) as exc:
        progress.clear()
        return _fail(exc)
    progress.clear()
    links = f" links={summary.links}" if args.session is not None else ""
    print(
        f"exported events={summary.events}{links} checkpoints={summary.checkpoints} "
        f"head_position={summary.head_position} head={summary.head_hash} to {summary.path}"
    )
    return EXIT_OK


def _export_proofs(args: argparse.Namespace) -> int:
    from palyra.cli._session_export import export_session

    try:
        records = export_session(args.data_dir or default_data_dir(), args.session, args.out)
    except (PalyraError, OSError) as exc:
        return _fail(exc)
    print(f"exported records={records} of session {args.session} with inclusion proofs "
          f"to {args.out}")
    return EXIT_OK


def checkpoint(argv: Sequence[str]) -> int:
    """Sign the current chain head with the data dir's ed25519 key and store the checkpoint.

    Asks the running daemon (``CreateCheckpoint``) when one owns the data dir,
    else opens the data dir itself.
    """
    parser = _parser(
        "checkpoint",
        "Store a signed checkpoint of the current journal head: through the running daemon "
        "(found via <data-dir>/daemon.json and admin.token), or on the data dir when none runs.",
    )
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    from palyra.cli import _checkpoint  # grpc client: loaded only for this command

    return _checkpoint.run(args.data_dir or default_data_dir())


def prune(argv: Sequence[str]) -> int:
    """Retention now: turn records older than ``--older-than`` days into hash tombstones.

    Asks the running daemon (``PruneJournal``) when one owns the data dir, else
    opens the data dir itself.
    """
    parser = _parser(
        "prune",
        "Prune the oldest journal records (every event older than --older-than days, none of "
        "a run that is not terminal, never the newest) into hash tombstones: verification "
        "still passes, cursors into them get CURSOR_TRUNCATED. Through the running daemon, "
        "or on the data dir when none runs.",
    )
    parser.add_argument("--older-than", type=float, required=True, metavar="DAYS",
                        help="prune records whose events are all older than this (days, >= 0)")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    if not args.older_than >= 0 or args.older_than == float("inf"):
        print("ERROR --older-than must be a finite number of days >= 0", file=sys.stderr)
        return EXIT_ERROR
    from palyra.cli import _prune  # grpc client: loaded only for this command

    return _prune.run(args.data_dir or default_data_dir(), args.older_than)


def traces(argv: Sequence[str]) -> int:
    """The GenAI spans of an exported bundle as OTLP/JSON, equal to the ones the daemon sent."""
    parser = argparse.ArgumentParser(
        prog="palyra journal traces",
        description="Rebuild the OpenTelemetry GenAI spans of a bundle and print them as "
                    "OTLP/JSON (ids derived from session and journal position, as live).")
    parser.add_argument("--bundle", type=Path, required=True, help="an exported bundle")
    parser.add_argument("--service-name", default="palyra", help="resource service.name")
    parser.add_argument("--out", type=Path, help="write here instead of stdout")
    args = _parse(parser, argv)
    if isinstance(args, int):
        return args
    from palyra.ops.rebuild import bundle_otlp_json

    if _is_session_proofs(args.bundle):  # its records are not event lines: no spans to read
        print("ERROR this is a session's records with their proofs; traces reads a bundle "
              "(`journal export --session S --links`, or the whole journal)", file=sys.stderr)
        return EXIT_ERROR
    try:
        text = bundle_otlp_json(args.bundle, service_name=args.service_name)
    except (PalyraError, OSError) as exc:
        return _fail(exc)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    else:
        sys.stdout.write(text + "\n")
    return EXIT_OK


def prove(argv: Sequence[str]) -> int:
    """The transparency log's proof of one entry (``palyra.cli._tlog``)."""
    from palyra.cli import _tlog

    return _tlog.prove(argv, default_data_dir())


def verify_proof(argv: Sequence[str]) -> int:
    """Check a proof file offline (``palyra.cli._tlog``)."""
    from palyra.cli import _tlog

    return _tlog.verify_proof_cmd(argv)


def consistency(argv: Sequence[str]) -> int:
    """Check that one signed checkpoint extends another (``palyra.cli._tlog``)."""
    from palyra.cli import _tlog

    return _tlog.consistency_cmd(argv, default_data_dir())


COMMANDS = {"verify": verify, "export": export, "checkpoint": checkpoint, "prune": prune,
            "traces": traces, "prove": prove, "verify-proof": verify_proof,
            "consistency": consistency}


def main(argv: Sequence[str]) -> int:
    """Dispatch ``palyra journal <command> [args]``."""
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: palyra journal {{{'|'.join(COMMANDS)}}} [options]", file=sys.stderr)
        return EXIT_ERROR
    return COMMANDS[argv[0]](argv[1:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
