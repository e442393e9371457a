"""Source text of ``palyra_gen/errors.py``: ErrorCode → transport statuses.

The table comes from the ``(palyra.v1.error_mapping)`` option on each value, so
the gRPC and HTTP gateways read one table and can never disagree.
"""

from __future__ import annotations

from codegen.descriptors import ProtoEnum

GENERATOR = "codegen/render_errors.py"
_PREFIX = "ERROR_CODE_"

# google.rpc.Code names; fixed by gRPC itself, not by the spec.
GRPC_STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)  # fmt: skip


def render(enum: ProtoEnum, label: str) -> str:
    """The module text. Values are in enum-number order; ``UNSPECIFIED`` is kept apart."""
    lines = [
        f'"""Error code → gRPC/HTTP status, from the ``error_mapping`` option in {label}.\n\n'
        "Keys are ``palyra.core.errors.ErrorCode`` values (proto names without ``ERROR_CODE_``).\n"
        '"""\n\n',
        "from __future__ import annotations\n\nfrom dataclasses import dataclass\nfrom typing import Final\n\n",
        '__all__ = ("ERROR_MAPPING", "GRPC_STATUS_NAMES", "UNSPECIFIED_MAPPING", "ErrorMapping")\n\n',
        "@dataclass(frozen=True, slots=True)\nclass ErrorMapping:\n"
        '    """How one error code appears on each transport."""\n\n'
        '    grpc_status: int\n    """google.rpc.Code numeric value."""\n'
        '    http_status: int\n    """HTTP status code."""\n'
        '    retryable: bool\n    """Whether the caller may retry the same call unchanged."""\n\n',
    ]
    unspecified = None
    lines.append("#: Every specified error code, in proto enum order.\n")
    lines.append("ERROR_MAPPING: Final[dict[str, ErrorMapping]] = {\n")
    for value in sorted(enum.values, key=lambda v: v.number):
        m = value.error_mapping
        assert m is not None, value.name  # checks.check_error_codes ran first
        text = f"ErrorMapping(grpc_status={m.grpc_status}, http_status={m.http_status}, retryable={m.retryable})"
        key = value.name.removeprefix(_PREFIX)
        if key == "UNSPECIFIED":
            unspecified = text
            continue
        lines.append(f"    {key!r}: {text},\n")
    lines.append("}\n\n")
    lines.append("#: Mapping of ERROR_CODE_UNSPECIFIED: the fallback for an unknown code.\n")
    lines.append(
        f"UNSPECIFIED_MAPPING: Final = {unspecified or 'ErrorMapping(grpc_status=2, http_status=500, retryable=False)'}\n\n"
    )
    lines.append("#: google.rpc.Code number → name (for logs and error bodies).\n")
    lines.append("GRPC_STATUS_NAMES: Final[dict[int, str]] = {\n")
    lines += [f"    {i}: {name!r},\n" for i, name in enumerate(GRPC_STATUS_NAMES)]
    lines.append("}\n")
    return "".join(lines)
