"""The composition root: config → journal → application → gRPC + HTTP, one process.

``run_daemon`` owns every long-lived resource through one ``AsyncExitStack``
and every server task through one ``asyncio.TaskGroup``. SIGINT/SIGTERM start
a drain: listeners stop, in-flight calls are cancelled (the runs they drove
live on in the engine), the engine parks its runs durably, the journal
closes, and the process exits 0. After SIGKILL the next start recovers from
the journal.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TextIO

import structlog

from palyra.app import PalyraApp
from palyra.channels.counters import counting_signature_failures
from palyra.channels.ingress import DISCORD_PREFIX, SLACK_PREFIX, TELEGRAM_PREFIX, WEBHOOK_PREFIX
from palyra.config import PalyraConfig
from palyra.daemon.datadir import ensure_data_dir
from palyra.daemon.discovery import DaemonInfo, remove_daemon_info, write_daemon_info
from palyra.daemon.listen import bind_setting, bound_port
from palyra.daemon.logs import configure_logging, daemon_secrets
from palyra.daemon.operations import daemon_metrics, plain_routes, tracing_process
from palyra.daemon.starting import StartupResponder
from palyra.daemon.starting_grpc import StartupGrpcResponder
from palyra.daemon.tlog_http import tlog_routes
from palyra.daemon.tokens import ADMIN_TOKEN_FILE, load_or_create_admin_token
from palyra.daemon.trim import idle_trim, trim_when_idle
from palyra.daemon.wiring import VERSION, open_application
from palyra.engine import AttachmentStore, live_run_ids
from palyra.journal import (
    JournalConfig,
    JournalStore,
    PruneResult,
    checkpoint_every,
    retention_every,
    sign_tree_every,
)
from palyra.transport.auth import Authenticator
from palyra.transport.grpc import GrpcGateway
from palyra.transport.http import HttpGateway, IngressHandler, create_http_app
from palyra.transport.streams import OpenStreams

_log = structlog.get_logger("palyra.daemon")


def resolve_admin_token(config: PalyraConfig, out: TextIO) -> str:
    """The admin token from config/env, else ``admin.token`` (generated and printed once)."""
    if config.auth.admin_token:
        return config.auth.admin_token
    token, created = load_or_create_admin_token(config.data_dir)
    if created:
        path = config.data_dir / ADMIN_TOKEN_FILE
        print(f"palyra: generated admin token (stored 0600 in {path}; shown once):\n{token}",
              file=out, flush=True)
    return token


async def run_daemon(
    config: PalyraConfig,
    *,
    out: TextIO = sys.stdout,
    stop: asyncio.Event | None = None,
) -> int:
    """Serve until SIGINT/SIGTERM (or ``stop`` is set); return the exit code."""
    scrubber = configure_logging(config.log, daemon_secrets(config))
    # Both ports first: a port in use must stop start-up before anything is
    # written to the data dir (the admin token included).
    async with contextlib.AsyncExitStack() as stack:
        grpc_sock = bind_setting(config.grpc.host, config.grpc.port, "grpc")
        stack.callback(grpc_sock.close)
        http_sock = bind_setting(config.http.host, config.http.port, "http")
        stack.callback(http_sock.close)
        ensure_data_dir(config.data_dir)
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, _on_signal(signum, stop))
        # Until the daemon serves, a SIGHUP (policy reload) is moot: start-up reads the
        # policy files anyway. Handled, so it does not end the process.
        loop.add_signal_handler(signal.SIGHUP, lambda: _log.info("signal", signal="SIGHUP",
                                                                 during="start-up"))
        admin_token = resolve_admin_token(config, out)
        scrubber.add(admin_token)
        pid = os.getpid()
        tracer = tracing_process(config)
        if tracer is not None:  # stopped after the journal closes: parked runs are traced too
            stack.push_async_callback(tracer.stop)
        # Until the gateways serve, both ports answer that the daemon is starting
        # (/readyz 503 and gRPC UNAVAILABLE naming the phase, the standard gRPC health
        # service NOT_SERVING) instead of leaving clients in the backlog.
        starting = StartupResponder(http_sock, "palyra", VERSION)
        starting.start()
        stack.callback(starting.stop)
        starting_grpc = StartupGrpcResponder(grpc_sock, "palyra", VERSION,
                                             max_message_bytes=config.grpc.max_message_bytes)
        starting_grpc.start()
        stack.callback(starting_grpc.stop)

        def on_phase(phase: str) -> None:
            starting.set_phase(phase)
            starting_grpc.set_phase(phase)

        app, make_ctx = await open_application(config, stack, on_phase=on_phase)
        on_phase("starting the listeners")
        if tracer is not None:
            await tracer.start(app.store.head().count)
        authenticator = Authenticator.from_config(config.auth, admin_token,
                                                  principal_tokens=app.token_book.principal_of)
        streams = OpenStreams()
        metrics = daemon_metrics(app, config, streams)
        grpc_gateway = GrpcGateway(app, authenticator=authenticator, make_ctx=make_ctx,
                                   config=config.grpc, streams=streams,
                                   ready=lambda: all(ok for _name, ok, _detail in (
                                       app.readiness() if app.readiness else ())))
        http_gateway = HttpGateway(
            create_http_app(app, authenticator=authenticator, make_ctx=make_ctx,
                            config=config.http, ingress=_ingress_routes(app),
                            plain=plain_routes(app, config, metrics), streams=streams,
                            static=tlog_routes(app.store)),
            shutdown_grace_s=config.daemon.shutdown_grace_s, limits=config.http,
        )
        info = DaemonInfo(pid=pid, grpc_host=config.grpc.host, grpc_port=bound_port(grpc_sock),
                          http_host=config.http.host, http_port=bound_port(http_sock),
                          data_dir=str(config.data_dir.resolve()), version=VERSION)
        async with asyncio.TaskGroup() as tg:
            starting_grpc.stop()  # its clients are sent a GOAWAY and reconnect to the gateway
            await grpc_gateway.start(grpc_sock)
            signer = (tg.create_task(checkpoint_every(app.store, config.daemon.checkpoint_interval_s),
                                     name="checkpoints")
                      if config.daemon.checkpoint_interval_s > 0 else None)
            tree_signer = tg.create_task(
                sign_tree_every(app.store, origin=config.journal.tlog_origin or None),
                name="tlog-checkpoints")
            retention = _start_retention(tg, app.store, config.journal,
                                         app.engine.attachments)
            store = app.store
            trimmer = tg.create_task(trim_when_idle(lambda: store.stats().commits,
                                                    trim=idle_trim(config.data_dir)),
                                     name="idle-trim")
            starting.stop()  # the gateway takes the socket over
            tg.create_task(http_gateway.serve(http_sock), name="http")
            if app.reload_policy is not None:  # SIGHUP: read the policy files again
                reload = app.reload_policy
                loop.add_signal_handler(signal.SIGHUP, lambda: tg.create_task(
                    reload(), name="policy-reload"))
            # What start-up built (modules, the policy set, the embedder's tables, the
            # engine graph) lives as long as the daemon: keep it out of the collector's
            # full passes, which otherwise walk it all again and again under load.
            gc.collect()
            gc.freeze()
            write_daemon_info(config.data_dir, info)
            stack.callback(remove_daemon_info, config.data_dir, pid)
            print(f"palyra: serving gRPC on {info.grpc_host}:{info.grpc_port}, "
                  f"HTTP on {info.http_host}:{info.http_port} (pid {pid})", file=out, flush=True)
            _log.info("daemon_ready", grpc_port=info.grpc_port, http_port=info.http_port, pid=pid,
                      data_dir=info.data_dir)
            await stop.wait()
            _log.info("daemon_draining")
            loop.remove_signal_handler(signal.SIGHUP)
            for task in (signer, tree_signer, retention, trimmer):
                if task is not None:  # the TaskGroup would otherwise wait on them
                    task.cancel()
            http_gateway.close()
            await _bounded(grpc_gateway.close(), config.daemon.shutdown_grace_s)
        # Leaving the exit stack parks the engine's runs and closes the journal.
    _log.info("daemon_stopped")
    return 0


def _start_retention(tg: asyncio.TaskGroup, store: JournalStore, config: JournalConfig,
                     attachments: AttachmentStore) -> asyncio.Task[None] | None:
    """Prune old records every ``retention_interval_s`` when ``retention_max_age_days`` is
    set, then drop the attachments no retained tape names any more."""
    if config.retention_max_age_days <= 0:
        return None

    def logged(result: PruneResult) -> None:
        _log.info("journal_pruned", first=result.first, through=result.through,
                  records=result.records, events=result.events,
                  bytes_freed=result.bytes_freed, claim_position=result.position)

    return tg.create_task(retention_every(
        store, int(config.retention_max_age_days * 86_400_000), config.retention_interval_s,
        live_runs=lambda: live_run_ids(store), batch_records=config.retention_batch_records,
        on_pruned=logged,
        on_error=lambda exc: _log.warning("journal_prune_failed", code=exc.code.value,
                                          error=exc.message),
        then=lambda: _collected(attachments)), name="retention")


async def _collected(attachments: AttachmentStore) -> None:
    dropped = await attachments.collect()
    if dropped:
        _log.info("attachments_collected", blobs=dropped)


def _ingress_routes(app: PalyraApp) -> dict[str, IngressHandler]:
    """The chat platforms' own HTTP ingress (signed by them, not by our tokens)."""
    if app.ingress is None or app.channels is None:
        return {}
    counters = app.channels.counters  # signature failures journal nothing: counted here
    return {path: counting_signature_failures(handler, prefix, counters)
            for path, handler, prefix in (
                ("/v1/ingress/slack", app.ingress.slack, SLACK_PREFIX),
                ("/v1/ingress/webhooks", app.ingress.webhook, WEBHOOK_PREFIX),
                ("/v1/ingress/telegram", app.ingress.telegram, TELEGRAM_PREFIX),
                ("/v1/ingress/discord", app.ingress.discord_interaction, DISCORD_PREFIX))}


def _on_signal(signum: int, stop: asyncio.Event) -> Callable[[], None]:
    def handler() -> None:
        _log.info("signal", signal=signal.Signals(signum).name)
        stop.set()

    return handler


async def _bounded(awaitable: Awaitable[None], seconds: float) -> None:
    # A stuck client must not keep the daemon from exiting.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(max(seconds, 0.1)):
            await awaitable
