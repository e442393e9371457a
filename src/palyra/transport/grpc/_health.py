"""The standard gRPC health service (``grpc.health.v1.Health``) over the daemon's readiness.

Load balancers, Kubernetes' gRPC probes and ``grpc_health_probe`` ask this
service, not palyra's own ``GetHealth``. ``Check`` answers SERVING when every
readiness check passes (``/readyz`` would answer 200) and NOT_SERVING when one
fails; ``Watch`` sends the status, then again each time it changes (polled
every :data:`POLL_S`). The overall service (``""``) and every palyra service
name are known; any other name is NOT_FOUND. Like ``/readyz``, it needs no
token (the gateway's auth listener lets :data:`HEALTH_PREFIX` through).

While the daemon starts, ``palyra.daemon.starting_grpc`` answers the same
service on the same port with NOT_SERVING.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from grpclib.health.check import ServiceCheck
from grpclib.health.service import OVERALL, Health

HEALTH_PREFIX = "/grpc.health.v1.Health/"
POLL_S = 1.0  # how stale a Check's answer may be, and how often a Watch looks again


def health_service(ready: Callable[[], bool], services: Sequence[Any]) -> Health:
    """grpclib's ``Health`` for ``services`` (grpclib servicers), SERVING while ``ready()``."""

    async def readiness() -> bool:
        return ready()

    probe = ServiceCheck(readiness, check_ttl=POLL_S, check_timeout=POLL_S)
    checks: dict[Any, list[ServiceCheck]] = {service: [probe] for service in services}
    checks[OVERALL] = [probe]
    return Health(checks)
