"""Who sees which item, as a predicate on one item and as a boolean mask over index rows.

:class:`Visibility` (:mod:`palyra.memory.visibility`, free of numpy) is the rule (an item belongs to its owner; ``session``
items show only in their session, ``agent`` items only to runs of their agent; operators
see all, expired items nobody). :class:`ScopeColumns` keeps each index row's owner,
scope, session, agent, kind and expiry as small integer codes, so a search can turn the
rule into one mask over all rows with a handful of vectorised comparisons instead of
asking the predicate row by row, and a caller with few items among many is not a slow
search. Masks are cached per rule until an item is added or removed.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import numpy.typing as npt

from palyra.memory.items import MemoryItem
from palyra.memory.visibility import Visibility

_SCOPES = {"principal": 0, "session": 1, "agent": 2}
_START = 64
MASKS = 16  # cached masks (one per caller and session being served)

Mask = npt.NDArray[np.bool_]


class ScopeColumns:
    """Per-row codes of what visibility looks at; row numbers are the index's."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {"": 0}
        self.owner = np.full(_START, -1, dtype=np.int32)  # -1: no item in this row
        self.scope = np.zeros(_START, dtype=np.int8)
        self.session = np.zeros(_START, dtype=np.int32)
        self.agent = np.zeros(_START, dtype=np.int32)
        self.kind = np.zeros(_START, dtype=np.int32)
        self.expires = np.zeros(_START, dtype=np.int64)
        self._expiring = 0  # rows with an expiry
        self._session_rows = 0  # rows of session-scoped items
        self._generation = 0
        self._masks: OrderedDict[tuple[object, ...], tuple[int, Mask]] = OrderedDict()

    def _code(self, text: str) -> int:
        code = self._codes.get(text)
        if code is None:
            code = self._codes[text] = len(self._codes)
        return code

    def set(self, row: int, item: MemoryItem) -> None:
        """Record ``item`` in ``row``."""
        if row >= len(self.owner):
            size = max(row + 1, len(self.owner) * 2)
            for name in ("owner", "scope", "session", "agent", "kind", "expires"):
                old = getattr(self, name)
                grown = np.full(size, -1 if name == "owner" else 0, dtype=old.dtype)
                grown[: len(old)] = old
                setattr(self, name, grown)
        self.clear(row)
        self.owner[row] = self._code(item.owner)
        self.scope[row] = _SCOPES.get(item.scope, 0)
        self.session[row] = self._code(item.session_id)
        self.agent[row] = self._code(item.agent_id)
        self.kind[row] = self._code(item.kind)
        self.expires[row] = item.expires_ms
        self._expiring += 1 if item.expires_ms else 0
        self._session_rows += 1 if self.scope[row] == 1 else 0
        self._generation += 1

    def clear(self, row: int) -> None:
        """The row holds no item any more."""
        if row < len(self.owner) and self.owner[row] != -1:
            self._expiring -= 1 if self.expires[row] else 0
            self._session_rows -= 1 if self.scope[row] == 1 else 0
            self.owner[row] = -1
            self.expires[row] = 0
            self._generation += 1

    def mask(self, rule: Visibility, used: int) -> Mask:
        """Rows ``0..used-1`` that ``rule`` admits (a cached array: do not modify it).

        The cached part is per caller and agent; the session and expiry parts are applied
        on top, and only when some row is session-scoped or expires (each run of a
        session would otherwise miss the cache)."""
        key = (rule.principal, rule.everyone, rule.agent_id, rule.skip_kinds)
        cached = self._masks.get(key)
        if cached is not None and cached[0] == self._generation and len(cached[1]) == used:
            self._masks.move_to_end(key)
            mask = cached[1]
        else:
            mask = self._compute(rule, used)
            self._masks[key] = (self._generation, mask)
            if len(self._masks) > MASKS:
                self._masks.popitem(last=False)
        if self._session_rows:
            scope = self.scope[:used]
            if rule.session_id:  # session items: only in their session (operators too)
                session = self._codes.get(rule.session_id, -2)
                mask = mask & ((scope != 1) | (self.session[:used] == session))
            elif not rule.everyone:  # outside any session: none (operators: all)
                mask = mask & (scope != 1)
        if self._expiring:
            expires = self.expires[:used]
            mask = mask & ((expires == 0) | (expires > rule.now_ms))
        return mask

    def _compute(self, rule: Visibility, used: int) -> Mask:
        owner, scope = self.owner[:used], self.scope[:used]
        if rule.everyone:
            mask: Mask = owner != -1
        else:
            code = self._codes.get(rule.principal)
            if code is None:
                return np.zeros(used, dtype=np.bool_)
            mask = owner == code
        if not rule.everyone:  # agent items: only for that agent's runs
            agent = self._codes.get(rule.agent_id, -2) if rule.agent_id else -2
            mask &= (scope != 2) | (self.agent[:used] == agent)
        for kind in rule.skip_kinds:
            if kind in self._codes:
                mask &= self.kind[:used] != self._codes[kind]
        return mask
