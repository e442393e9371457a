"""The daemon's tracing exporter process: spans over real OTLP/HTTP, out of the daemon's process.

A loopback collector decodes what arrives with the OpenTelemetry protobuf
classes (the oracle); the spans must point at the journal events they describe,
and the exporter must never outlive its daemon, stopped or killed. It reads the
journal through the store, so it traces a daemon on PostgreSQL too (the data
dir's ``journal/postgres.json`` names the database).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from palyra.journal import JournalConfig, JournalStore
from palyra.testing.apps import tool_loop_text
from palyra.testing.postgres import PostgresServer
from palyra.testing.spawn import DaemonProcess, clean_env

pytestmark = pytest.mark.slow

USER = {"x-palyra-principal": "user:ops", "x-palyra-device-id": "01J00000000000000000000000"}
_DESCRIBED = {"invoke_agent": "tape.agent_loop", "chat": "tape.provider_turn_output",
              "execute_tool": "tape.tool_result", "apply_guardrail": "tape.tool_proposal"}


class _Collector(ThreadingHTTPServer):
    spans: list[Span]


class _Handler(BaseHTTPRequestHandler):
    server: _Collector

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        request = ExportTraceServiceRequest.FromString(body)
        self.server.spans += [span for resource in request.resource_spans
                              for scope in resource.scope_spans for span in scope.spans]
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


@pytest.fixture
def collector() -> Iterator[_Collector]:
    server = _Collector(("127.0.0.1", 0), _Handler)
    server.spans = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def _attribute(span: Span, key: str) -> Any:
    for kv in span.attributes:
        if kv.key == key:
            return getattr(kv.value, kv.value.WhichOneof("value"))
    return None


def _daemon(tmp_path: Path, port: int, journal: str = "") -> DaemonProcess:
    config = tmp_path / "palyra.toml"
    config.write_text(f'[tracing]\nenabled = true\n'
                      f'otlp_endpoint = "http://127.0.0.1:{port}/v1/traces"\n' + journal)
    return DaemonProcess(tmp_path / "data", env=clean_env(), extra_args=("--config", str(config)))


def _run(daemon: DaemonProcess, steps: int) -> None:
    answer = httpx.post(f"http://127.0.0.1:{daemon.http_port}/v1/runs", timeout=60,
                        headers={**USER, "authorization": f"Bearer {daemon.token}"},
                        json={"input": {"text": tool_loop_text(steps)}, "complete": True,
                              "wait": True})
    assert answer.json()["run"]["state"] == "RUN_STATE_DONE", answer.text


@pytest.mark.parametrize("backend", ["lmdb", "postgres"])
def test_spans_reach_a_collector_from_a_process_beside_the_daemon(
        tmp_path: Path, collector: _Collector, backend: str, request: pytest.FixtureRequest
) -> None:
    journal = ""
    if backend == "postgres":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        journal = f'[journal]\nbackend = "postgres"\ndsn = "{server.create_database()}"\n'
    daemon = _daemon(tmp_path, collector.server_address[1], journal).start()
    try:
        (exporter,) = _children(daemon.pid)
        _run(daemon, steps=2)
        # A service manager's stop signals the whole group at once: the exporter must
        # outlast the daemon's drain (it stops when the daemon closes its pipe).
        os.kill(exporter, signal.SIGTERM)
        assert not _gone(exporter, within_s=3)
    finally:
        assert daemon.stop() == 0
    assert _gone(exporter, within_s=5), "the exporter outlived its daemon's stop"
    names = sorted(span.name.split()[0] for span in collector.spans)
    assert names == sorted(["invoke_agent", "chat", "chat", "chat", "execute_tool",
                            "execute_tool", "apply_guardrail", "apply_guardrail"]), names
    store = JournalStore.open(tmp_path / "data", config=JournalConfig(readonly=True))
    try:
        events = {e.position: e for e in store.read_range(0, 1000)}
    finally:
        store.close()
    (root,) = [s for s in collector.spans if s.name == "invoke_agent"]
    for span in collector.spans:
        event = events[_attribute(span, "palyra.journal.position")]
        assert event.kind == _DESCRIBED[span.name.split()[0]]
        assert _attribute(span, "palyra.run.id") == event.run_id
        assert span.trace_id == root.trace_id
        assert span is root or span.parent_span_id == root.span_id


def test_the_exporter_exits_when_its_daemon_is_killed(
        tmp_path: Path, collector: _Collector) -> None:
    daemon = _daemon(tmp_path, collector.server_address[1]).start()
    try:
        (exporter,) = _children(daemon.pid)
    finally:
        daemon.kill()
    assert _gone(exporter, within_s=5), "the exporter outlived its killed daemon"


def _nice(pid: int) -> int:
    """``pid``'s niceness (field 19 of ``/proc/<pid>/stat``)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[16])


def test_the_exporter_yields_the_cpu_to_its_daemon(
        tmp_path: Path, collector: _Collector) -> None:
    daemon = _daemon(tmp_path, collector.server_address[1]).start()
    try:
        (exporter,) = _children(daemon.pid)
        # The default [tracing] exporter_nice: the daemon's steps go first under
        # contention, the exporter catches up from the journal. It lowers its own
        # priority once its modules are imported, so allow it that moment.
        wanted = min(_nice(daemon.pid) + 10, 19)
        deadline = time.monotonic() + 10
        while _nice(exporter) != wanted and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _nice(exporter) == wanted
    finally:
        assert daemon.stop() == 0
