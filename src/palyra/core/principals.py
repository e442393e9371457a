"""Principal names: which ones are operators. Pure.

Operators (``admin:*`` and ``system:*``) may read every run and approval and
act on the whole journal. The engine (run access) and the application (approval
listings, journal verify/export/checkpoint) both ask this one predicate, so the
two can never disagree about who an operator is. Who may *decide* an approval
is a Cedar policy (``palyra.policy``), not this rule.
"""

from __future__ import annotations

OPERATOR_PREFIXES: tuple[str, ...] = ("admin:", "system:")


def is_operator(principal: str) -> bool:
    """Whether ``principal`` is an operator (``admin:*`` or ``system:*``).

    The match is on the full prefix with its colon: ``admin`` and
    ``administrator`` are ordinary principals.
    """
    return principal.startswith(OPERATOR_PREFIXES)


MAX_PRINCIPAL = 256


def principal_problem(principal: str) -> str:
    """What is wrong with ``principal`` as a name ("" when nothing).

    A principal is ``kind:name``: a non-empty kind, a non-empty name, at most
    :data:`MAX_PRINCIPAL` characters, and no whitespace or control character anywhere
    (a newline in a name would forge lines in logs and headers that quote it).
    """
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        return "must look like 'user:alice' (kind:name)"
    if len(principal) > MAX_PRINCIPAL:
        return f"is longer than {MAX_PRINCIPAL} characters"
    if not principal.isprintable() or any(c.isspace() for c in principal):
        return "holds whitespace or a control character"
    return ""
