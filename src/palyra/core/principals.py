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
