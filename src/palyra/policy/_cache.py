"""Memoised Cedar answers (tool calls, ``approval.decide``), keyed by what the policy set can see.

Cedar stays the only source of truth: the cache stores Cedar's own answer for
one request shape and hands it back for an identical shape. What makes two
requests identical is decided from the loaded policy text, once: entities are
empty (everything is in the context), so a policy can only see the principal,
the action, the resource and the ``context`` attributes it names. When every
use of ``context`` in the policy set is a plain ``context.<attr>`` access, the
key holds exactly those attributes, so the run id, the session id and the
budget drop out of the key unless a policy reads them. Any other use
(``context has x``, ``context["x"]``, ``context`` passed whole) keys on the
whole context, which is always correct, just less often a hit. Likewise a
resource's id is in the key only when some policy names a literal of its type
(``literal_types``): without one, every approval looks the same to Cedar, so
one admin deciding approval after approval asks Cedar once.

The cache belongs to one loaded policy set (a gate never changes its set), and
the policy hash is part of the key besides, so a decision can never outlive the
policies that made it. Answers with engine errors are not cached. The size is
bounded (least recently used entries go first), so memory stays bounded
whatever requests arrive.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from palyra.policy._model import EngineResult

_CONTEXT_WORD = re.compile(r"\bcontext\b")
_CONTEXT_ATTR = re.compile(r"\bcontext\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)")
_ENTITY_LITERAL = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*::\s*\"")

DEFAULT_MAX_ENTRIES = 4096

CacheKey = tuple[Any, ...]


def context_projection(policy_texts: Iterable[str]) -> frozenset[str] | None:
    """The ``context`` attributes the policies can read, or None for "all of it".

    Comments and string literals are not stripped: a ``context`` mentioned
    there can only make the projection wider (or None), never narrower.
    """
    attrs: set[str] = set()
    for text in policy_texts:
        words = len(_CONTEXT_WORD.findall(text))
        found = _CONTEXT_ATTR.findall(text)
        if words != len(found):
            return None
        attrs.update(found)
    return frozenset(attrs)


def literal_types(policy_texts: Iterable[str]) -> frozenset[str]:
    """Entity types the policies name a literal of (``Approval::"…"`` names ``Approval``).

    With no entities loaded (everything is in the context), the only way a
    policy can tell one resource of a type from another of the same type is an
    entity literal of that type: Cedar has no operator that turns an entity
    into its id string, ``is`` sees only the type, and ``in`` / ``==`` against
    any other entity are the same for every id of the type. So the id of a
    resource whose type is *not* in this set cannot change Cedar's answer and
    drops out of the cache key. Comments and strings are not stripped: a type
    named there only keeps ids in the key (wider, never wrong).
    """
    types: set[str] = set()
    for text in policy_texts:
        types.update(_ENTITY_LITERAL.findall(text))
    return frozenset(types)


_PLAIN = frozenset({str, int, bool, float, type(None)})


def _frozen(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    return value


class DecisionCache:
    """A bounded LRU of ``EngineResult`` by the decision-relevant request."""

    def __init__(self, projection: frozenset[str] | None, policy_hash: str,
                 max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self._attrs = tuple(sorted(projection)) if projection is not None else None
        self._policy_hash = policy_hash
        self._max = max_entries
        self._entries: OrderedDict[CacheKey, EngineResult] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def reads(self, attr: str) -> bool:
        """Whether the policies can read ``context.<attr>`` (True when they may read all)."""
        return self._attrs is None or attr in self._attrs

    @property
    def policy_hash(self) -> str:
        """The hash of the policy set this cache belongs to (the first part of every key)."""
        return self._policy_hash

    def key(self, action: str, principal: str, resource: str,
            context: Mapping[str, Any]) -> CacheKey:
        """The decision-relevant part of one Cedar request."""
        seen: tuple[Any, ...]
        if self._attrs is None:
            seen = tuple(sorted((k, _frozen(v)) for k, v in context.items()))
        else:
            # Most values are plain scalars: only containers take the freezing call, and
            # when none is a container the tuple is made in C (no generator frame per value).
            seen = tuple(map(context.get, self._attrs))
            if not _PLAIN.issuperset(map(type, seen)):
                seen = tuple(v if v.__class__ in _PLAIN else _frozen(v) for v in seen)
        return (self._policy_hash, action, principal, resource, seen)

    def get(self, key: CacheKey) -> EngineResult | None:
        """The cached answer for ``key``, or None."""
        result = self._entries.get(key)
        if result is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return result

    def put(self, key: CacheKey, result: EngineResult) -> None:
        """Remember Cedar's answer (answers with engine errors are never kept)."""
        if result.errors or self._max <= 0:
            return
        self._entries[key] = result
        self._entries.move_to_end(key)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
