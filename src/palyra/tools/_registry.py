"""The tool registry and its one execution path.

``ToolRegistry.execute`` is the only way tools run: it validates arguments,
applies the timeout and the output cap, and turns every expected failure into
a failed ``ToolResult`` the model can read. It never swallows cancellation:
a cancelled run cancels its tool, and the handler's ``finally`` blocks (e.g.
killing a child process) run before the ``CancelledError`` continues upward.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import msgspec

from palyra.core.eager import Suspended, first_step, resume
from palyra.core.errors import ErrorCode, PalyraError
from palyra.tools._spec import ToolContext, ToolError, ToolResult, ToolSpec

_ENCODER = msgspec.json.Encoder()


def cap_output(output_json: bytes, max_bytes: int) -> tuple[str, bool]:
    """Fit encoded output into ``max_bytes`` while keeping it valid JSON.

    Output over the cap is replaced by
    ``{"truncated": true, "original_bytes": N, "preview": "<start of the JSON>"}``
    no longer than ``max_bytes`` (for caps of at least ~100 bytes).

    Returns:
        ``(json_text, truncated)``.
    """
    if len(output_json) <= max_bytes:
        return output_json.decode(), False
    budget = max(0, max_bytes - 80)
    while True:
        preview = output_json[:budget].decode("utf-8", "ignore")
        wrapped = _ENCODER.encode(
            {"truncated": True, "original_bytes": len(output_json), "preview": preview}
        )
        # Escaping can grow the preview; shrink until the wrapper fits.
        if len(wrapped) <= max_bytes or budget == 0:
            return wrapped.decode(), True
        budget = max(0, budget - (len(wrapped) - max_bytes))


class ToolRegistry:
    """Named tools, their schemas, and safe execution.

    Args:
        tools: Initial tools.

    Raises:
        PalyraError: ``CONFIG_INVALID`` on a duplicate tool name.
    """

    def __init__(self, tools: Iterable[ToolSpec[Any]] = ()) -> None:
        self._tools: dict[str, ToolSpec[Any]] = {}
        # Bumped on every change, so views of the catalogue know to rebuild it.
        self.version = 0
        for tool in tools:
            self.register(tool)

    def register(self, tool: ToolSpec[Any]) -> None:
        """Add a tool.

        Raises:
            PalyraError: ``CONFIG_INVALID`` if the name is already taken.
        """
        if tool.name in self._tools:
            raise PalyraError(
                f"tool {tool.name!r} is registered twice", code=ErrorCode.CONFIG_INVALID
            )
        self._tools[tool.name] = tool
        self.version += 1

    def replace(self, tool: ToolSpec[Any]) -> None:
        """Swap the tool registered under ``tool.name`` (e.g. a deployment's own ``fs.read``).

        Raises:
            PalyraError: ``CONFIG_INVALID`` if no tool has that name yet.
        """
        if tool.name not in self._tools:
            raise PalyraError(f"tool {tool.name!r} is not registered", code=ErrorCode.CONFIG_INVALID)
        self._tools[tool.name] = tool
        self.version += 1

    def unregister(self, name: str) -> None:
        """Remove the tool called ``name`` (an MCP server dropped it); no-op if absent."""
        if self._tools.pop(name, None) is not None:
            self.version += 1

    def get(self, name: str) -> ToolSpec[Any] | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ToolSpec[Any]]:
        return iter(sorted(self._tools.values(), key=lambda t: t.name))

    def __len__(self) -> int:
        return len(self._tools)

    async def execute(
        self,
        call_name: str,
        raw_args: Mapping[str, Any],
        ctx: ToolContext,
        *,
        timeout_s: float | None = None,
    ) -> ToolResult:
        """Validate, run and cap one tool call. Policy is the caller's job.

        Args:
            call_name: Tool name as the model sent it.
            raw_args: Decoded JSON arguments as the model sent them.
            ctx: Execution context.
            timeout_s: Override of the tool's own timeout.

        Returns:
            A ``ToolResult``. Unknown tools, invalid arguments, handler errors
            and timeouts are failed results, never exceptions.

        Raises:
            asyncio.CancelledError: If the calling task is cancelled; the
                handler is cancelled too and its cleanup has run.
        """
        tool = self._tools.get(call_name)
        if tool is None:
            return ToolResult(success=False, error=f"unknown tool {call_name!r}")
        if tool.input_schema is not None:
            args: Any = dict(raw_args)
            problem = tool.check_args(args) if tool.check_args is not None else None
            if problem is not None:
                return ToolResult(success=False,
                                  error=f"invalid arguments for {call_name}: {problem}")
        else:
            try:
                args = msgspec.convert(dict(raw_args), tool.args_type, strict=True)
            except msgspec.ValidationError as exc:
                return ToolResult(success=False,
                                  error=f"invalid arguments for {call_name}: {exc}")
        limit = tool.timeout_s if timeout_s is None else timeout_s
        try:
            # The timer is armed only if the handler suspends (see core.eager),
            # with the deadline counted from before its first step.
            deadline = asyncio.get_running_loop().time() + limit
            output = first_step(tool.handler(args, ctx))
            if isinstance(output, Suspended):
                async with asyncio.timeout_at(deadline):
                    output = await resume(output)
        except TimeoutError:
            # asyncio.timeout only converts its own cancellation; an outer
            # cancel stays a CancelledError and is not caught here.
            return ToolResult(
                success=False, error=f"{call_name} timed out after {limit:g}s", timed_out=True
            )
        except ToolError as exc:
            return ToolResult(success=False, error=exc.message, facts=exc.facts)
        except PalyraError as exc:
            return ToolResult(success=False, error=exc.message)
        except Exception as exc:
            # A tool bug must not kill the run; the model sees what happened.
            return ToolResult(
                success=False, error=f"{call_name} failed: {type(exc).__name__}: {exc}"
            )
        try:
            encoded = _ENCODER.encode(output.value)
        except (TypeError, msgspec.EncodeError) as exc:
            return ToolResult(
                success=False, error=f"{call_name} returned unencodable output: {exc}"
            )
        text, truncated = cap_output(encoded, tool.max_output_bytes)
        return ToolResult(success=True, output_json=text, truncated=truncated or output.truncated,
                          facts=output.facts, images=output.images)
