"""Who sees which item, as a predicate on one item (no numpy, so a daemon with no memory
items never imports it; :mod:`palyra.memory.scope` turns the rule into row masks)."""

from __future__ import annotations

import dataclasses

from palyra.memory.items import MemoryItem


@dataclasses.dataclass(frozen=True, slots=True)
class Visibility:
    """Which items a caller sees: its own principal-wide items, its items of ``session_id``,
    its items scoped to ``agent_id``; ``everyone`` (operators) sees every owner's; never
    an expired item, nor one of ``skip_kinds``."""

    principal: str
    session_id: str
    everyone: bool
    agent_id: str
    now_ms: int
    skip_kinds: frozenset[str] = frozenset()

    def __call__(self, item: MemoryItem) -> bool:
        """Whether the caller sees ``item``."""
        if item.kind in self.skip_kinds:
            return False
        if item.expires_ms and item.expires_ms <= self.now_ms:
            return False
        if not self.everyone and item.owner != self.principal:
            return False
        if item.scope == "agent":
            return self.everyone or (bool(self.agent_id) and item.agent_id == self.agent_id)
        if self.session_id and item.scope == "session" and item.session_id != self.session_id:
            return False
        return not (not self.session_id and item.scope == "session" and not self.everyone)

    def without_kinds(self, kinds: frozenset[str] | tuple[str, ...]) -> Visibility:
        """The same rule, also hiding items of ``kinds``."""
        return dataclasses.replace(self, skip_kinds=self.skip_kinds | frozenset(kinds))
