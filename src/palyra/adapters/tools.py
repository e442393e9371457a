"""Binds ``ToolsPort`` to ``palyra.tools.ToolRegistry``."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from palyra.engine import AttachmentRec, ToolOutcome
from palyra.providers import ToolSpecForModel
from palyra.tools import ToolContext, ToolRegistry, args_digest, attest, canonical_args_json
from palyra.tools import is_sensitive as _is_sensitive


class RegistryTools:
    """The engine's view of a tool registry (catalogue, digests, execution, attestation)."""

    def __init__(self, registry: ToolRegistry, workspace_dir: Path) -> None:
        self._registry = registry
        self._workspace = workspace_dir
        # Built-ins are fixed after start-up; MCP servers add and drop tools, and
        # the registry's version says when the catalogue must be rebuilt.
        self._version = -1
        self._catalog: list[ToolSpecForModel] = []
        self._catalog_hash = ""
        self._refresh()

    def _refresh(self) -> None:
        if self._version == self._registry.version:
            return
        self._catalog = [ToolSpecForModel(t.name, t.description, t.json_schema())
                         for t in self._registry]
        encoded = msgspec.json.Encoder(order="sorted").encode(self._catalog)
        self._catalog_hash = hashlib.sha256(encoded).hexdigest()
        self._version = self._registry.version

    def catalog(self) -> list[ToolSpecForModel]:
        """Tools advertised to the model."""
        self._refresh()
        return self._catalog

    def catalog_hash(self) -> str:
        """SHA-256 of the canonical catalogue."""
        self._refresh()
        return self._catalog_hash

    def is_read_only(self, name: str) -> bool:
        """True for tools that declare ``read_only`` and nothing sensitive."""
        tool = self._registry.get(name)
        return tool is not None and not _is_sensitive(tool.capabilities)

    def may_rerun(self, name: str) -> bool:
        """True for read-only tools and tools declared idempotent."""
        tool = self._registry.get(name)
        return tool is not None and (tool.idempotent or not _is_sensitive(tool.capabilities))

    def args_digest(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Digest binding an approval to the exact call."""
        return args_digest(name, arguments)

    async def execute(self, name: str, arguments: Mapping[str, Any], *, session_id: str,
                      run_id: str, timeout_s: float, posture: str = "",
                      args_json: str = "") -> ToolOutcome:
        """Run the tool through the registry's capped path and attest the result."""
        tool = self._registry.get(name)
        limit = min(timeout_s, tool.timeout_s) if tool is not None else timeout_s
        ctx = ToolContext(workspace_dir=self._workspace, session_id=session_id, run_id=run_id,
                          posture=posture)
        result = await self._registry.execute(name, arguments, ctx, timeout_s=limit)
        digest = attest(name, args_json or canonical_args_json(arguments), result)
        return ToolOutcome(success=result.success, output_json=result.output_json,
                           error=result.error, timed_out=result.timed_out,
                           truncated=result.truncated, execution_sha256=digest,
                           executor=tool.executor if tool is not None else "builtin",
                           facts=result.facts,
                           images=tuple((AttachmentRec(i.sha256, i.mime_type, i.width, i.height,
                                                       len(i.data)), i.data)
                                        for i in result.images))
