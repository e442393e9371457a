"""`python -m bench <workload> [args]` — dispatch to a benchmark module.

Workloads: ``journal`` (bench/journal.py), ``tool-loop`` (bench/tool_loop.py),
``memory`` (bench/memory.py), ``ingress`` (bench/ingress.py, signed webhooks into a
real daemon), ``retention`` (bench/retention.py, pruning into hash tombstones) and
``open-runs`` (bench/open_runs.py, memory per open run and after completion, daemon RSS);
``console`` (bench/console.py, the web console in headless Chromium);
``tasks`` (bench/tasks.py, the durable task queue: enqueue to start latency, tasks/s);
``diff`` (bench/diff.py) sets two ``tool-loop --json`` files side by side;
``failover`` (bench/failover.py, a SIGKILLed daemon's runs taken over on PostgreSQL);
``daemons`` (bench/daemons.py, the tool-loop over gRPC on 1 and 3 daemons sharing PostgreSQL,
beside one on LMDB);
``tool-calls`` (bench/tool_calls.py, one built-in, MCP and skill call's CPU apart from the run).
"""

from __future__ import annotations

import importlib
import sys

_WORKLOADS = {"journal": "bench.journal", "tool-loop": "bench.tool_loop", "diff": "bench.diff",
              "memory": "bench.memory", "ingress": "bench.ingress",
              "retention": "bench.retention", "open-runs": "bench.open_runs",
              "console": "bench.console", "tasks": "bench.tasks",
              "failover": "bench.failover", "daemons": "bench.daemons",
              "tool-calls": "bench.tool_calls"}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in _WORKLOADS:
        print(f"usage: python -m bench {{{'|'.join(_WORKLOADS)}}} [args...]", file=sys.stderr)
        return 2
    module = importlib.import_module(_WORKLOADS[argv[0]])
    result: int = module.main(argv[1:])
    return result


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
