"""A streamed-up message read whole from its one chunk: the same messages and acks as grpclib.

``_recv_message_capped`` takes a message that arrived as exactly one received chunk
(a HITL decision on its RunStream) straight from grpclib's ``Buffer`` (``_codec``'s
``_whole_message``), where grpclib reads its prefix and its body apart. These tests
hold it to grpclib's own ``recv_message`` on twin buffers fed the same chunks (whole
messages, split ones, several in one chunk, padding-only ones, with the reader
waiting or not): the same messages, the same acknowledgements in the same order,
the same end. They read ``Buffer``'s and ``asyncio.Queue``'s private fields, so
they fail on a grpclib (0.4.9, pinned) or Python upgrade that changes them.
Then decisions go up a RunStream over a real listener.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpclib.protocol
import grpclib.stream
import pytest
from grpclib.client import Channel
from grpclib.const import Cardinality
from hypothesis import given, settings
from hypothesis import strategies as st
from palyra_gen.palyra import v1 as pb

from palyra.app import PalyraApp
from palyra.core.errors import ErrorCode, PalyraError
from palyra.testing.apps import scripted_app
from palyra.transport.grpc._codec import CappedProtoCodec, _recv_message_capped, _whole_message
from tests.transport._served import grpc_listening


class _Stream:
    """What a reader uses of ``grpclib.protocol.Stream``: its buffer and ``recv_data``
    (grpclib's own body: ``return await self.buffer.read(size)``)."""

    def __init__(self) -> None:
        self.acks: list[int] = []
        self.buffer = grpclib.protocol.Buffer(self.acks.append)

    async def recv_data(self, size: int) -> bytes:
        return await self.buffer.read(size)


class _Raw:
    """A codec answering a message's bytes as they came."""

    def decode(self, data: bytes, message_type: Any) -> bytes:
        return bytes(data)


def _framed(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


async def _read_all(stream: _Stream, read: Any, codec: Any) -> list[Any]:
    messages = []
    while (message := await read(stream, codec, bytes)) is not None:
        messages.append(message)
    return messages


async def _feed_and_read(chunks: list[tuple[bytes, int]], read: Any, waiting: bool,
                         codec: Any = None) -> tuple[list[Any], list[int]]:
    """``chunks`` (data, flow-controlled length) added as grpclib adds DATA frames, then
    the end; read with ``read`` as they come (``waiting``) or after all of them."""
    stream = _Stream()
    codec = codec or _Raw()
    reader = asyncio.ensure_future(_read_all(stream, read, codec))
    if waiting:
        await asyncio.sleep(0)  # the reader waits on the empty buffer
    for data, ack_size in chunks:
        stream.buffer.add(data, ack_size)
        if waiting:
            await asyncio.sleep(0)
    stream.buffer.eof()
    return await reader, stream.acks


@st.composite
def _chunked_messages(draw: st.DrawFn) -> list[tuple[bytes, int]]:
    """Whole messages' bytes cut at drawn points, each chunk with 0-3 bytes of padding."""
    payloads = draw(st.lists(st.binary(max_size=40), max_size=6))
    wire = b"".join(_framed(p) for p in payloads)
    cuts = sorted(draw(st.lists(st.integers(0, len(wire)), max_size=8)))
    bounds = [0, *cuts, len(wire)]
    chunks = []
    for start, end in itertools.pairwise(bounds):
        pad = draw(st.integers(0, 3))
        if end > start or pad:  # h2 hands grpclib no empty unpadded frame but the last
            chunks.append((wire[start:end], end - start + pad))
    return chunks


@settings(max_examples=300, deadline=None)
@given(_chunked_messages(), st.booleans())
def test_messages_and_acks_are_grpclibs(chunks: list[tuple[bytes, int]], waiting: bool) -> None:
    """Whatever the chunking, the reader gets grpclib's messages and makes its acks."""
    async def both() -> None:
        ours = await _feed_and_read(chunks, _recv_message_capped, waiting)
        theirs = await _feed_and_read(chunks, grpclib.stream.recv_message, waiting)
        assert ours == theirs
    asyncio.run(both())


async def test_a_whole_chunk_is_taken_and_any_other_left_as_it_was() -> None:
    """One chunk that is one whole message is taken (and acked once, its padding too); a
    chunk that is not is put back first in the queue, where ``Buffer.read`` takes it."""
    stream = _Stream()
    stream.buffer.add(_framed(b"decision"), 15)
    assert await _whole_message(stream.buffer, None) == b"decision"
    assert stream.acks == [15] and stream.buffer._unacked.empty()
    half, rest = _framed(b"decision")[:7], _framed(b"decision")[7:]
    stream.buffer.add(half, 7)
    stream.buffer.add(rest, 6)
    assert await _whole_message(stream.buffer, None) is None
    assert stream.acks == [15]
    assert list(stream.buffer._unacked._queue) == [(half, 7, 7), (rest, 6, 6)]
    assert await grpclib.stream.recv_message(stream, _Raw(), bytes) == b"decision"  # type: ignore[arg-type]


async def test_a_whole_chunk_over_the_cap_is_refused_as_a_split_one() -> None:
    """A message above the codec's cap is refused (PAYLOAD_TOO_LARGE) whole or split, and one
    at the cap decodes the same either way."""
    decision = pb.RunStreamRequest(v=1, approval=pb.InlineApprovalDecision(
        approval_id="01J00000000000000000000000", decision=pb.ApprovalDecision.APPROVE))
    wire = _framed(bytes(decision))
    for cap, ok in ((len(wire) - 5, True), (len(wire) - 6, False)):
        codec = CappedProtoCodec(cap)
        for chunks in ([(wire, len(wire))], [(wire[:3], 3), (wire[3:], len(wire) - 3)]):
            stream = _Stream()
            for data, ack_size in chunks:
                stream.buffer.add(data, ack_size)
            if ok:
                got = await _recv_message_capped(stream, codec, pb.RunStreamRequest)
                assert got == decision
            else:
                with pytest.raises(PalyraError) as err:
                    await _recv_message_capped(stream, codec, pb.RunStreamRequest)
                assert err.value.code is ErrorCode.PAYLOAD_TOO_LARGE


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[PalyraApp]:
    async with scripted_app(tmp_path / "data") as (made, _store):
        yield made


async def test_decisions_up_a_run_stream_over_a_real_listener(app: PalyraApp) -> None:
    """A HITL run over grpclib on loopback: each decision goes up the open RunStream (one
    DATA frame, read whole) and the run goes on to its reply."""
    gateway, port = await grpc_listening(app, principal="user:recv")
    channel = Channel("127.0.0.1", port)
    try:
        stub = pb.GatewayServiceStub(channel)
        session = (await stub.resolve_session(pb.ResolveSessionRequest(session_key="d"))).session
        assert session is not None
        await stub.set_tool_posture(pb.SetToolPostureRequest(
            session_id=session.session_id, tool_name="add", posture=pb.ToolPosture.ASK_EACH_TIME))
        text = ("Start from 0 and add 1 to the running total 3 times, one `add` tool call per "
                "step, then reply with the final result.")
        decided = []
        events: list[pb.TapeEvent] = []
        async with channel.request("/palyra.v1.GatewayService/RunStream",
                                   Cardinality.STREAM_STREAM, pb.RunStreamRequest,
                                   pb.RunStreamResponse) as stream:
            await stream.send_message(pb.RunStreamRequest(
                v=1, session_key="d", batch=True, input=pb.MessageInput(text=text),
                complete=True))
            async for response in stream:
                for event in response.events:
                    events.append(event)
                    if event.tool_approval_request is not None:
                        approval_id = event.tool_approval_request.approval_id
                        decided.append(approval_id)
                        await stream.send_message(pb.RunStreamRequest(
                            approval=pb.InlineApprovalDecision(
                                approval_id=approval_id,
                                decision=pb.ApprovalDecision.APPROVE)))
            await stream.end()
        assert len(decided) == 3
        assert [e.message_replied.reply_text for e in events if e.message_replied] == ["result=3"]
        assert events[-1].status is not None and events[-1].status.state == pb.RunState.DONE
    finally:
        channel.close()
        await asyncio.wait_for(gateway.close(), 10)
