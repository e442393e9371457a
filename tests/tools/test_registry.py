"""Registry: validation, timeouts, output caps, errors, cancellation, schemas."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import msgspec
import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.tools import (
    Capability,
    ToolContext,
    ToolError,
    ToolOutput,
    ToolRegistry,
    ToolSpec,
    cap_output,
    default_registry,
)


class SleepArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    seconds: float


class BlobArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    size: int


async def _sleep(args: SleepArgs, ctx: ToolContext) -> ToolOutput:
    await asyncio.sleep(args.seconds)
    return ToolOutput("done")


async def _blob(args: BlobArgs, ctx: ToolContext) -> ToolOutput:
    return ToolOutput("é" * args.size)


async def _boom(args: BlobArgs, ctx: ToolContext) -> ToolOutput:
    raise RuntimeError("kaput")


async def _tool_error(args: BlobArgs, ctx: ToolContext) -> ToolOutput:
    raise ToolError("nice message")


async def _unencodable(args: BlobArgs, ctx: ToolContext) -> ToolOutput:
    return ToolOutput(object())


RO = frozenset({Capability.READ_ONLY})


def _registry() -> ToolRegistry:
    return ToolRegistry(
        [
            ToolSpec("sleep", "Sleep.", SleepArgs, RO, _sleep, timeout_s=0.05),
            ToolSpec("blob", "Blob.", BlobArgs, RO, _blob, max_output_bytes=200),
            ToolSpec("boom", "Boom.", BlobArgs, RO, _boom),
            ToolSpec("toolerror", "Err.", BlobArgs, RO, _tool_error),
            ToolSpec("unencodable", "Bad.", BlobArgs, RO, _unencodable),
        ]
    )


async def test_add_keeps_ints(ctx: ToolContext) -> None:
    registry = default_registry()
    result = await registry.execute("add", {"a": 2, "b": 3}, ctx)
    assert (result.success, result.output_json) == (True, '{"result":5}')
    result = await registry.execute("add", {"a": 2, "b": 0.5}, ctx)
    assert result.output_json == '{"result":2.5}'


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"a": "2", "b": 3}, "Expected `int | float`, got `str`"),
        ({"a": True, "b": 3}, "got `bool`"),
        ({"a": 1}, "missing required field `b`"),
        ({"a": 1, "b": 2, "c": 3}, "unknown field `c`"),
    ],
)
async def test_bad_args_are_failed_results(
    ctx: ToolContext, args: dict[str, object], fragment: str
) -> None:
    result = await default_registry().execute("add", args, ctx)
    assert not result.success
    assert result.error.startswith("invalid arguments for add: ")
    assert fragment in result.error


async def test_unknown_tool(ctx: ToolContext) -> None:
    result = await default_registry().execute("nope", {}, ctx)
    assert (result.success, result.error) == (False, "unknown tool 'nope'")


async def test_timeout(ctx: ToolContext) -> None:
    result = await _registry().execute("sleep", {"seconds": 3600}, ctx)
    assert (result.success, result.timed_out) == (False, True)
    assert "timed out after 0.05s" in result.error


async def test_timeout_override(ctx: ToolContext) -> None:
    result = await _registry().execute("sleep", {"seconds": 0}, ctx, timeout_s=5)
    assert result.success


async def test_output_truncated_to_valid_json(ctx: ToolContext) -> None:
    result = await _registry().execute("blob", {"size": 1000}, ctx)
    assert result.success and result.truncated
    assert len(result.output_json.encode()) <= 200
    decoded = msgspec.json.decode(result.output_json)
    assert decoded["truncated"] is True
    assert decoded["original_bytes"] == 2002
    assert decoded["preview"].startswith('"éé')


def test_cap_output_passthrough_and_tiny_cap() -> None:
    assert cap_output(b'{"a":1}', 100) == ('{"a":1}', False)
    text, truncated = cap_output(b'"' + b"x" * 500 + b'"', 0)
    assert truncated
    assert msgspec.json.decode(text)["preview"] == ""


async def test_handler_errors_become_failed_results(ctx: ToolContext) -> None:
    registry = _registry()
    boom = await registry.execute("boom", {"size": 1}, ctx)
    assert (boom.success, boom.error) == (False, "boom failed: RuntimeError: kaput")
    nice = await registry.execute("toolerror", {"size": 1}, ctx)
    assert (nice.success, nice.error) == (False, "nice message")
    bad = await registry.execute("unencodable", {"size": 1}, ctx)
    assert not bad.success and "unencodable output" in bad.error


async def test_cancellation_propagates(ctx: ToolContext) -> None:
    registry = _registry()
    task = asyncio.create_task(registry.execute("sleep", {"seconds": 3600}, ctx, timeout_s=3600))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_duplicate_registration_rejected() -> None:
    registry = _registry()
    with pytest.raises(PalyraError) as failed:
        registry.register(ToolSpec("sleep", "x", SleepArgs, RO, _sleep))
    assert failed.value.code is ErrorCode.CONFIG_INVALID


def test_model_catalogue_and_schema() -> None:
    registry = default_registry()
    names = [t.name for t in registry]
    assert names == sorted(names)
    assert "process.run" not in names  # disabled by default
    add = next(t for t in registry if t.name == "add")
    assert add.json_schema() == {
        "type": "object",
        "properties": {
            "a": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
            "b": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
        },
        "required": ["a", "b"],
        "additionalProperties": False,
    }


def test_model_result_content(tmp_path: Path) -> None:
    from palyra.tools import ToolResult

    assert ToolResult(True, '{"result":1}').model_content() == '{"result":1}'
    assert ToolResult(False, error="no").model_content() == '{"error":"no"}'


def test_replace_swaps_a_registered_tool_and_refuses_an_unknown_one() -> None:
    from palyra.tools import default_registry

    registry = default_registry()
    original = registry.get("echo")
    assert original is not None
    clone = dataclasses.replace(original, description="swapped")
    registry.replace(clone)
    assert registry.get("echo") is clone
    with pytest.raises(PalyraError) as info:
        registry.replace(dataclasses.replace(original, name="nope"))
    assert info.value.code == ErrorCode.CONFIG_INVALID


# Handlers that suspend are continued by core.eager.resume: what they await
# must reach them (values, errors, cancellation) exactly as with a plain await.
class StepsArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    steps: int
    fail: bool = False
    block_s: float = 0.0


CLEANED: list[str] = []


async def _steps(args: StepsArgs, ctx: ToolContext) -> ToolOutput:
    import time

    time.sleep(args.block_s)  # noqa: ASYNC251 -- a first step that blocks without suspending
    loop = asyncio.get_running_loop()
    total = 0
    try:
        for i in range(args.steps):
            future: asyncio.Future[int] = loop.create_future()
            loop.call_soon(future.set_result, i + 1)
            total += await future  # the value sent back into the handler
            await asyncio.sleep(0)
        if args.fail:
            raise RuntimeError(f"late {total}")
        await asyncio.sleep(3600 if args.steps < 0 else 0)
    finally:
        CLEANED.append(f"steps={args.steps}")
    return ToolOutput(total)


def _steps_registry() -> ToolRegistry:
    return ToolRegistry([ToolSpec("steps", "Steps.", StepsArgs, RO, _steps, timeout_s=0.2)])


async def test_a_suspending_handler_gets_every_awaited_value(ctx: ToolContext) -> None:
    result = await _steps_registry().execute("steps", {"steps": 4}, ctx)
    assert (result.success, result.output_json) == (True, "10")


async def test_an_error_after_a_suspension_is_a_failed_result(ctx: ToolContext) -> None:
    result = await _steps_registry().execute("steps", {"steps": 3, "fail": True}, ctx)
    assert (result.success, result.error) == (False, "steps failed: RuntimeError: late 6")


async def test_the_limit_counts_from_before_a_blocking_first_step(ctx: ToolContext) -> None:
    # 0.3 s blocked in the first step, then a suspension: the 0.2 s limit is gone.
    result = await _steps_registry().execute("steps", {"steps": 1, "block_s": 0.3}, ctx)
    assert (result.success, result.timed_out) == (False, True)


async def test_cancelling_a_suspended_handler_runs_its_cleanup(ctx: ToolContext) -> None:
    CLEANED.clear()
    task = asyncio.create_task(
        _steps_registry().execute("steps", {"steps": -1}, ctx, timeout_s=3600))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert CLEANED == ["steps=-1"]
