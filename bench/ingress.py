"""``python -m bench ingress``: signed deliveries of each adapter into a real ``palyra serve``.

Usage::

    python -m bench ingress [--events 2000] [-c 1,16] [--adapters webhook,slack,telegram,discord]
        [--reply-timeout 60] [--daemon-reflection] [--daemon-src DIR] [--json FILE]

For each adapter and concurrency C a fresh daemon (own data dir) gets one adapter
(``bench/ingress_platforms.py``: Standard Webhooks, Slack's Events API, a Telegram
webhook, Discord slash commands over HTTP) whose policy answers every message, replying
to the platform's local fake. Then:

* ingest: ``--events`` distinct deliveries (a quarter as many at C < 8), signed with the
  platform's own library and encoded to their request bytes beforehand, POSTed from C
  concurrent senders over kept-alive connections (``bench/ingress_client.py``: one write
  and llhttp per POST, so the generator takes little of the cores it shares with the
  daemon). Ack latency is POST sent -> 200 received (p50, p99, ms); events/s is
  accepted events over the wall time; CPU ms/event is the daemon's utime+stime
  (``/proc/<pid>/stat``) over the phase per accepted event; the sender's (this process's
  loop thread) and the platform fake's (its server threads) CPU over the same phase are
  shown beside it. The runs answering the
  messages already start during this phase, so their CPU is partly in it too. Then the
  wait until every one of them has its reply: the daemon's CPU over ingest and that
  drain, per accepted event, is its CPU per message *with its reply*. Over the same
  window the daemon's probe (``bench/probe.py``, loaded through ``bench/_site``, without
  its message count) gives the journal's events, appends and commits per message and
  the CPU per message of each of its threads (the event loop's, the journal writer's);
* redelivery: every ingested event once more, freshly signed (the platform retrying
  *after* its first delivery was acknowledged), and a tenth as many new events delivered
  as a *race*: two POSTs with the same ``webhook-id`` at once (so up to 2C in flight);
* drain: wait (``--reply-timeout``) until every admitted event has its reply, then count
  distinct replies, replies the receiver shows twice (``duplicate_replies``) and events
  answered more than once (a second run for one event).

The load generator runs on the same machine as the daemon and takes CPU from it; the
daemon's CPU per event is the steadier figure on a shared box. Targets at C=16: p99 ack
< 20 ms, >= 2,000 events/s, <= 1 ms of daemon CPU per event with its reply.

Post-run reflection is off in the daemon, as in the tool-loop bench (it is learning's
cost: a task of three commits and a re-read of the tape per answered message);
``--daemon-reflection`` leaves it on. ``--daemon-src`` runs the daemon from another
tree's ``src`` (a before/after comparison with the same load generator and fakes).
Discord's answers do not say whether a delivery was a duplicate, so its redelivery rows
show n/a; its replies still show any second run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import probe
from bench.ingress_client import RawClient, encode_post
from bench.ingress_platforms import PLATFORMS, Event, Platform
from palyra.testing.spawn import DaemonProcess, clean_env

TARGET_C, TARGET_P99_MS, TARGET_EVENTS_S, TARGET_CPU_MS = 16, 20.0, 2000.0, 1.0
_REPO = Path(__file__).resolve().parent.parent
WARMUP = 16
HOST = "127.0.0.1"

# Post-run reflection (on by default, every run sampled) adds its own task per answered
# message: learning's cost, not the channel's; off as in the tool-loop bench's daemon.
_NO_REFLECTION = "[learning]\nenabled = false\n"


def _cpu_s(pid: int) -> float:
    # Fields after the ")" of the command name; utime and stime are the 12th and 13th.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 2)


class Sender:
    """POSTs pre-encoded deliveries and keeps each answer with its ack latency."""

    def __init__(self, client: RawClient) -> None:
        self.client = client

    async def post(self, data: bytes) -> tuple[float, dict[str, Any]]:
        start = time.perf_counter()
        status, answer = await self.client.post(data)
        took_ms = (time.perf_counter() - start) * 1000
        if status != 200 or not isinstance(answer, dict):
            return took_ms, {"status": status, "error": str(answer)[:200]}
        return took_ms, answer

    async def many(self, signed: list[bytes], concurrency: int
                   ) -> tuple[list[tuple[float, dict[str, Any]]], float]:
        """Every delivery from ``concurrency`` senders; answers in order, and seconds."""
        out: list[tuple[float, dict[str, Any]]] = [(0.0, {})] * len(signed)
        work = iter(range(len(signed)))

        async def worker() -> None:
            for i in work:
                out[i] = await self.post(signed[i])

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return out, time.perf_counter() - start


def _signed(platform: Platform, events: list[Event], *, again: bool = False) -> list[bytes]:
    return [encode_post(HOST, platform.path, platform.headers(e, again=again), e.body)
            for e in events]


async def _wait_replies(platform: Platform, expected: set[str], timeout_s: float) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < timeout_s:
        if expected <= set(platform.replies()):
            break
        await asyncio.sleep(0.1)
    return time.perf_counter() - start


async def _bench(daemon: DaemonProcess, platform: Platform, concurrency: int,
                 events: int, reply_timeout_s: float, probe_path: str) -> dict[str, Any]:
    client = RawClient(HOST, daemon.http_port)
    try:
        sender = Sender(client)
        admitted: dict[str, str] = {}  # event key -> envelope id of its first delivery

        def admit(event: Event, answer: dict[str, Any]) -> None:
            if platform.admitted(answer) and event.key not in admitted:
                admitted[event.key] = answer.get("envelope_id", "")

        # Warm-up (imports, first sessions, connections), drained before measuring.
        warm = [platform.event("warm", i) for i in range(WARMUP)]
        for event, (_ms, answer) in zip(
                warm, (await sender.many(_signed(platform, warm), concurrency))[0], strict=True):
            admit(event, answer)
        await _wait_replies(platform, set(admitted), reply_timeout_s)

        # Ingest, then the drain of its replies: the CPU of both over the messages
        # admitted is the cost of a message with its reply (nothing else runs then).
        load = [platform.event("load", i) for i in range(events)]
        signed = _signed(platform, load)
        before = probe.remote_snapshot(probe_path)
        cpu0, gen0, bench0 = _cpu_s(daemon.pid), time.thread_time(), time.process_time()
        answers, seconds = await sender.many(signed, concurrency)
        cpu_ingest = _cpu_s(daemon.pid) - cpu0
        # The load generator (this thread) and the platform's fake (its server threads)
        # run on the daemon's cores: what they took is what the daemon could not have.
        gen_ingest = time.thread_time() - gen0
        bench_ingest = time.process_time() - bench0
        for event, (_ms, answer) in zip(load, answers, strict=True):
            admit(event, answer)
        first_drain_s = await _wait_replies(platform, set(admitted), reply_timeout_s)
        cpu_total = _cpu_s(daemon.pid) - cpu0
        window = probe.delta(before, probe.remote_snapshot(probe_path))
        accepted = sum(1 for _ms, a in answers if platform.admitted(a))
        errors = Counter(str(a.get("status", a.get("reason", "?"))) for _ms, a in answers
                         if not platform.admitted(a))
        latencies = [ms for ms, _a in answers]

        # Redelivery after the ack, then races of first delivery and redelivery.
        again, again_s = await sender.many(_signed(platform, load, again=True), concurrency)
        race = [platform.event("race", i) for i in range(max(1, events // 10))]
        pairs = [p for e in race for p in _signed(platform, [e, e])]  # same id, both at once

        async def pair_worker(items: list[int]) -> None:
            for i in items:
                pair = await asyncio.gather(sender.post(pairs[2 * i]),
                                            sender.post(pairs[2 * i + 1]))
                raced.append((race[i], pair[0][1], pair[1][1]))

        raced: list[tuple[Event, dict[str, Any], dict[str, Any]]] = []
        await asyncio.gather(*(pair_worker(list(range(w, len(race), concurrency)))
                               for w in range(concurrency)))
        for event, first, second in raced:
            admit(event, first)
            admit(event, second)
        dup_after = sum(1 for _ms, a in again if a.get("duplicate"))
        same_envelope = sum(1 for e, (_ms, a) in zip(load, again, strict=True)
                            if a.get("envelope_id") == admitted.get(e.key))
        race_dups = sum(1 for _e, a, b in raced
                        if a.get("envelope_id") == b.get("envelope_id")
                        and [a.get("duplicate"), b.get("duplicate")].count(True) == 1)

        # Drain: every admitted event (the races' too) must be answered.
        drain_s = await _wait_replies(platform, set(admitted), reply_timeout_s)
    finally:
        client.close()
    per_event = platform.replies()
    missing = sorted(set(admitted) - set(per_event))
    return {
        "adapter": platform.name,
        "answers_tell_duplicates": platform.name != "discord",
        "concurrency": concurrency,
        "events": events,
        "accepted": accepted,
        "refused": dict(errors),
        "ack_p50_ms": _pct(latencies, 50),
        "ack_p99_ms": _pct(latencies, 99),
        "ack_max_ms": round(max(latencies), 2),
        "events_per_s": round(accepted / seconds, 1),
        "daemon_cpu_ms_per_event_ingest": round(cpu_ingest / max(1, accepted) * 1000, 3),
        "generator_cpu_ms_per_event_ingest": round(gen_ingest / max(1, accepted) * 1000, 3),
        "fake_cpu_ms_per_event_ingest": round((bench_ingest - gen_ingest)
                                              / max(1, accepted) * 1000, 3),
        "redelivered_after": len(again),
        "redelivered_after_duplicate": dup_after,
        "redelivered_after_same_envelope": same_envelope,
        "redelivery_ack_p50_ms": _pct([ms for ms, _a in again], 50),
        "redelivery_ack_p99_ms": _pct([ms for ms, _a in again], 99),
        "redelivered_s": round(again_s, 2),
        "races": len(race),
        "races_one_duplicate": race_dups,
        "distinct_events_admitted": len(admitted),
        "distinct_replies": len(per_event),
        "missing_replies": len(missing),
        "missing_examples": missing[:5],
        "duplicate_replies": platform.duplicate_replies(),
        "events_answered_twice": sum(1 for n in per_event.values() if n > 1),
        "reply_deliveries_raw": platform.raw_replies(),
        "drain_s": round(drain_s, 2),
        "ingest_drain_s": round(first_drain_s, 2),
        "daemon_cpu_ms_per_event_total": round(cpu_total / max(1, accepted) * 1000, 3),
        **_per_message(window, accepted),
    }


def _per_message(window: dict[str, Any], accepted: int) -> dict[str, Any]:
    """Journal work and CPU by thread per accepted message over ingest and its drain (the
    daemon's probe, ``bench/probe.py``: the same window as the CPU with its reply)."""
    n = max(1, accepted)
    journal = window["journal"]
    threads = sorted(window["threads"].items(), key=lambda kv: -kv[1])
    return {
        "events_per_message": round(journal.get("appended_events", 0) / n, 2),
        "appends_per_message": round(journal.get("append_calls", 0) / n, 2),
        "commits_per_message": round(journal.get("commits", 0) / n, 2),
        "daemon_cpu_ms_per_event_by_thread": {
            (key.partition(":")[2] or key): round(seconds * 1000 / n, 3)
            for key, seconds in threads if seconds > 0},
    }


def run_one(adapter: str, concurrency: int, events: int, reply_timeout_s: float, *,
            reflection: bool = False, daemon_src: str = "") -> dict[str, Any]:
    platform = PLATFORMS[adapter]()
    # The probe (journal counters, CPU by thread) without its message count, whose
    # wrapper would add to the CPU measured.
    env = clean_env(BENCH_PROBE_MESSAGES="0")
    path = [*([daemon_src] if daemon_src else []), str(_REPO / "bench" / "_site"), str(_REPO),
            *env.get("PYTHONPATH", "").split(os.pathsep)]
    env["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
    with tempfile.TemporaryDirectory(prefix="palyra-bench-ingress-") as tmp, platform.fake:
        env["PALYRA_BENCH_PROBE"] = probe_path = str(Path(tmp) / "probe.sock")
        config = Path(tmp) / "palyra.toml"
        config.write_text(platform.config() + ("" if reflection else _NO_REFLECTION))
        with DaemonProcess(Path(tmp) / "data", env=env,
                           extra_args=("--config", str(config))) as daemon:
            result = asyncio.run(_bench(daemon, platform, concurrency, events, reply_timeout_s,
                                        probe_path))
            log = daemon.log()
        result["daemon_log_errors"] = sum(1 for line in log.splitlines()
                                          if "Traceback" in line or "error" in line.lower())
        return result


def _thread(r: dict[str, Any], name: str) -> float:
    """CPU ms per message of the daemon's thread ``name``; "" for the rest of its threads."""
    by = r["daemon_cpu_ms_per_event_by_thread"]
    if name:
        return by.get(name, 0.0)
    return round(sum(v for k, v in by.items()
                     if k not in ("MainThread", "palyra-journal-writer")), 3)


def _table(results: list[dict[str, Any]]) -> list[str]:
    def dup(r: dict[str, Any], field: str) -> str:
        if not r["answers_tell_duplicates"]:
            return "n/a"
        return f"{r[field]}/{r['redelivered_after']}"

    rows: list[tuple[str, Callable[[dict[str, Any]], Any]]] = [
        ("events (accepted)", lambda r: f"{r['events']} ({r['accepted']})"),
        ("ack p50 ms", lambda r: r["ack_p50_ms"]),
        ("ack p99 ms", lambda r: r["ack_p99_ms"]),
        ("ack max ms", lambda r: r["ack_max_ms"]),
        ("accepted events/s", lambda r: r["events_per_s"]),
        ("daemon CPU ms/event, ingest", lambda r: r["daemon_cpu_ms_per_event_ingest"]),
        ("daemon CPU ms/event, with reply", lambda r: r["daemon_cpu_ms_per_event_total"]),
        ("sender CPU ms/event, ingest", lambda r: r["generator_cpu_ms_per_event_ingest"]),
        ("platform fake CPU ms/event, ingest", lambda r: r["fake_cpu_ms_per_event_ingest"]),
        ("journal events/appends/commits per msg", lambda r: f"{r['events_per_message']}/"
         f"{r['appends_per_message']}/{r['commits_per_message']}"),
        ("  CPU ms/msg: loop thread", lambda r: _thread(r, "MainThread")),
        ("  CPU ms/msg: journal writer", lambda r: _thread(r, "palyra-journal-writer")),
        ("  CPU ms/msg: other threads", lambda r: _thread(r, "")),
        ("redelivered after ack: dup", lambda r: dup(r, "redelivered_after_duplicate")),
        ("  same envelope id", lambda r: dup(r, "redelivered_after_same_envelope")),
        ("  redelivery ack p50/p99 ms", lambda r: f"{r['redelivery_ack_p50_ms']}/"
                                                 f"{r['redelivery_ack_p99_ms']}"),
        ("raced pairs: exactly one dup", lambda r: f"{r['races_one_duplicate']}/{r['races']}"
         if r["answers_tell_duplicates"] else "n/a"),
        ("replies distinct / admitted", lambda r: f"{r['distinct_replies']}/"
                                                  f"{r['distinct_events_admitted']}"),
        ("duplicate replies shown", lambda r: r["duplicate_replies"]),
        ("events answered twice", lambda r: r["events_answered_twice"]),
        ("reply deliveries (raw)", lambda r: r["reply_deliveries_raw"]),
        ("drain s (after ingest)", lambda r: r["ingest_drain_s"]),
        ("drain s (after redelivery)", lambda r: r["drain_s"]),
        ("daemon log error lines", lambda r: r["daemon_log_errors"]),
    ]
    head = f"{'':34}" + "".join(f"{r['adapter'] + ' C=' + str(r['concurrency']):>18}"
                                for r in results)
    return [head] + [f"{name:34}" + "".join(f"{get(r)!s:>18}" for r in results)
                     for name, get in rows]


def _verdicts(results: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in results:
        if r["concurrency"] != TARGET_C:
            continue
        checks = [(f"p99 ack < {TARGET_P99_MS:g} ms", r["ack_p99_ms"] < TARGET_P99_MS),
                  (f">= {TARGET_EVENTS_S:g} events/s", r["events_per_s"] >= TARGET_EVENTS_S),
                  (f"<= {TARGET_CPU_MS:g} ms CPU/event with reply",
                   r["daemon_cpu_ms_per_event_total"] <= TARGET_CPU_MS)]
        out.append(f"{r['adapter']} at C={TARGET_C}: " + ", ".join(
            f"{name} {'met' if ok else 'not met'}" for name, ok in checks))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ingress", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2000, help="events at C >= 8")
    parser.add_argument("-c", "--concurrency", default="1,16")
    parser.add_argument("--adapters", default=",".join(PLATFORMS),
                        help="comma-separated: " + ", ".join(PLATFORMS))
    parser.add_argument("--reply-timeout", type=float, default=60.0)
    parser.add_argument("--daemon-reflection", action="store_true",
                        help="leave post-run reflection on (the daemon's default)")
    parser.add_argument("--daemon-src", default="",
                        help="run the daemon from this src dir (another tree's), first on "
                             "its PYTHONPATH")
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    results = []
    for adapter in (a for a in args.adapters.split(",") if a):
        if adapter not in PLATFORMS:
            parser.error(f"unknown adapter {adapter!r}")
        for c in (int(s) for s in args.concurrency.split(",") if s):
            # One in flight is the slow case; a quarter of the events still gives a p99.
            events = args.events if c >= 8 else max(100, args.events // 4)
            results.append(run_one(adapter, c, events, args.reply_timeout,
                                   reflection=args.daemon_reflection,
                                   daemon_src=args.daemon_src))
    for line in _table(results):
        print(line)
    for line in _verdicts(results):
        print("target:", line)
    print(f"load average: {os.getloadavg()[0]:.1f}; reflection "
          f"{'on' if args.daemon_reflection else 'off'}"
          + (f"; daemon from {args.daemon_src}" if args.daemon_src else ""))
    if args.json:
        text = json.dumps({"target": {"concurrency": TARGET_C, "p99_ack_ms": TARGET_P99_MS,
                                      "events_per_s": TARGET_EVENTS_S,
                                      "cpu_ms_per_event": TARGET_CPU_MS},
                           "results": results}, indent=2)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
