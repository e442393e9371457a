"""Who may see what: the one caller-scoping rule of the read side.

Operators (principals starting with ``admin:`` or ``system:``) see every
approval and may verify, export and checkpoint the whole journal. Any other
principal sees only the approvals of runs it started (the approval's
``requested_by``), and another principal's approval does not exist for it
(NOT_FOUND, so ids cannot be probed). Who may *decide* an approval is the
Cedar policy ``approval.decide`` (``palyra.policy``), not this module.
"""

from __future__ import annotations

from collections.abc import Callable

from palyra.app._convert import identity_of
from palyra.app.context import CallContext
from palyra.core.errors import PermissionDenied
from palyra.core.principals import OPERATOR_PREFIXES, is_operator
from palyra.engine import ApprovalRecord, IdentityRec, may_access

# Re-exported: callers of this module ask it who is an operator. The rule itself
# lives in ``palyra.core.principals``, shared with the engine's run access.
__all__ = ["OPERATOR_PREFIXES", "approval_visibility", "is_operator", "require_operator",
           "sees_approval"]


def sees_approval(caller: IdentityRec, record: ApprovalRecord) -> bool:
    """Whether ``caller`` may read ``record``: the rule of the run it belongs to."""
    return may_access(caller, record.requested_by)


def approval_visibility(caller: IdentityRec) -> Callable[[ApprovalRecord], bool]:
    """A record predicate for ``caller``'s listings and exports."""
    if is_operator(caller.principal):
        return lambda record: True
    return lambda record: may_access(caller, record.requested_by)


def require_operator(ctx: CallContext, action: str) -> IdentityRec:
    """The caller's identity, if it is an operator.

    Raises:
        Unauthenticated: the call carried no credentials.
        PermissionDenied: the principal is not ``admin:*`` / ``system:*``.
    """
    identity = identity_of(ctx)
    if not is_operator(identity.principal):
        raise PermissionDenied(
            f"{action} needs an operator principal (one starting with "
            f"{' or '.join(repr(p) for p in OPERATOR_PREFIXES)}); "
            f"{identity.principal!r} is not one",
            details={"principal": identity.principal, "action": action,
                     "required_prefix": ",".join(OPERATOR_PREFIXES)})
    return identity
