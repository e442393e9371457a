"""The provider registry: every configured provider by name, and routes over them.

A *route* is what a run's model calls go to: a primary target and its fallbacks,
each written ``provider`` or ``provider/model`` (provider names never hold a
``/``; model names may). Routes are stored as text on the run record, so a
resumed run asks the same providers, and resolved here at each model call.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence

import httpx

from palyra.core.errors import ErrorCode, InvalidArgument, PalyraError
from palyra.providers._config import ProviderConfig
from palyra.providers._factory import build_provider
from palyra.providers._types import ModelProvider


@dataclasses.dataclass(frozen=True, slots=True)
class Target:
    """One provider and the model asked of it ("" for the provider's own model)."""

    provider: str
    model: str = ""

    @property
    def label(self) -> str:
        """``provider`` or ``provider/model``: the stored form."""
        return f"{self.provider}/{self.model}" if self.model else self.provider


_RESOLVED_MAX = 256


def parse_target(text: str) -> Target:
    """``provider`` or ``provider/model`` as a :class:`Target` (split at the first ``/``).

    An empty provider (``/model``) stands for the default provider.
    """
    provider, _, model = text.strip().partition("/")
    return Target(provider.strip(), model.strip())


class ProviderRegistry:
    """Named providers, the default one first.

    Args:
        entries: ``(config, provider)`` pairs; the first is the default, used by a
            run with no route. Names (``config.registry_name``) must be unique.

    Raises:
        PalyraError: ``CONFIG_INVALID`` for a duplicate or malformed name.
    """

    def __init__(self, entries: Sequence[tuple[ProviderConfig, ModelProvider]]) -> None:
        if not entries:
            raise PalyraError("no model provider is configured", code=ErrorCode.CONFIG_INVALID)
        self._configs: dict[str, ProviderConfig] = {}
        self._providers: dict[str, ModelProvider] = {}
        for config, provider in entries:
            name = config.registry_name
            if not name or "/" in name or name in self._configs:
                raise PalyraError(
                    f"provider name {name!r} is empty, holds a '/' or is used twice",
                    code=ErrorCode.CONFIG_INVALID, details={"setting": "providers.name"})
            self._configs[name] = config
            self._providers[name] = provider
        self._default = entries[0][0].registry_name
        # resolve()'s answers by route: every model call resolves its run's route, and
        # the registry never changes after this (a new config builds a new registry).
        self._resolved: dict[tuple[str, ...], tuple[tuple[Target, ModelProvider], ...]] = {}

    @classmethod
    def build(cls, default: ProviderConfig, others: Iterable[ProviderConfig] = (), *,
              client: httpx.AsyncClient | None = None,
              clock: Callable[[], float] = time.monotonic) -> ProviderRegistry:
        """Build every provider of the config (``[provider]`` then ``[[providers]]``)."""
        configs = [default, *others]
        for config in configs[1:]:
            if not config.name:
                raise PalyraError("every [[providers]] entry needs a name",
                                  code=ErrorCode.CONFIG_INVALID,
                                  details={"setting": "providers.name"})
        return cls([(c, build_provider(c, client=client, clock=clock)) for c in configs])

    @property
    def default(self) -> ModelProvider:
        """The default provider (a run with no route, and background work with no run, ask it)."""
        return self._providers[self._default]

    @property
    def names(self) -> list[str]:
        """Every provider name, the default first."""
        return list(self._providers)

    def config(self, name: str) -> ProviderConfig:
        """The named provider's configuration (``KeyError`` if unknown)."""
        return self._configs[name]

    def problem(self, target: Target) -> str:
        """Why ``target`` cannot be served ("" when it can)."""
        config = self._configs.get(target.provider or self._default)
        if config is None:
            return (f"unknown provider {target.provider!r}; configured: "
                    f"{', '.join(self._configs)}")
        if target.model and config.models and target.model not in config.models:
            return (f"provider {target.provider!r} does not offer model {target.model!r}; "
                    f"it offers: {', '.join(config.models)}")
        return ""

    def validate(self, labels: Iterable[str], field: str) -> None:
        """Check a route as a client wrote it.

        Raises:
            InvalidArgument: a target names an unknown provider or a model it does not offer.
        """
        for label in labels:
            problem = self.problem(parse_target(label))
            if problem:
                raise InvalidArgument(problem, details={"field": field})

    def resolve(self, route: Sequence[str]) -> list[tuple[Target, ModelProvider]]:
        """The targets of a stored route, each with its provider; the default for ``()``.

        A target's empty model becomes the provider's configured one, so the
        tape and the cache digest name the model actually asked for.

        Raises:
            PalyraError: ``CONFIG_INVALID`` when the config no longer has a target
                the route names (a provider removed after the run started).
        """
        key = tuple(route)
        known = self._resolved.get(key)
        if known is not None:
            return list(known)
        out: list[tuple[Target, ModelProvider]] = []
        for label in route or (self._default,):
            target = parse_target(label)
            problem = self.problem(target)
            if problem:
                raise PalyraError(f"model route: {problem}", code=ErrorCode.CONFIG_INVALID,
                                  details={"target": label})
            name = target.provider or self._default
            config = self._configs[name]
            out.append((Target(name, target.model or config.model), self._providers[name]))
        if len(self._resolved) >= _RESOLVED_MAX:  # routes are client-chosen: stay bounded
            self._resolved.clear()
        self._resolved[key] = tuple(out)
        return out

    async def aclose(self) -> None:
        """Close every provider's pooled connections."""
        for provider in self._providers.values():
            await provider.aclose()
