"""Property tests: bundle tampering is always detected; reads return what was written."""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from palyra.core.canonical import normalize
from palyra.core.redaction import redact
from palyra.journal import (
    EventDraft,
    JournalStore,
    export_bundle,
    verify_bundle,
    verify_store,
)
from palyra.testing.postgres import PostgresServer

from .helpers import BACKENDS, config_for, draft

# LMDB I/O per example: no deadline, modest example counts (the suite profile
# sets max_examples; these tests stay within it).
IO = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _bundles() -> dict[str, bytes]:
    """One full and one session bundle with checkpoints, built once per test run."""
    root = Path(tempfile.mkdtemp(prefix="palyra-bundle-"))

    async def build() -> None:
        async with JournalStore.open(root / "data") as store:
            await store.checkpoint()
            for i in range(12):
                # 1 to 3 events per call, so records of several events are in the bundles
                # (and one call spans two sessions).
                await store.append(
                    [
                        draft(
                            i,
                            session_id=f"s{(i + (k if i == 7 else 0)) % 3}",
                            run_id="r",
                            tape=True,
                            payload={"i": i, "k": k, "f": i / 3, "password": "pw", "t": "é✓"},
                        )
                        for k in range(1 + i % 3)
                    ]
                )
                if i % 5 == 4:
                    await store.checkpoint()

    asyncio.run(build())
    export_bundle(root / "data", root / "full.ndjson")
    export_bundle(root / "data", root / "s1.ndjson", session_id="s1")
    return {
        "full": (root / "full.ndjson").read_bytes(),
        "session": (root / "s1.ndjson").read_bytes(),
    }


def _verify_bytes(data: bytes) -> bool:
    with tempfile.NamedTemporaryFile(suffix=".ndjson") as handle:
        handle.write(data)
        handle.flush()
        return verify_bundle(Path(handle.name)).ok


def test_untouched_bundles_verify() -> None:
    for data in _bundles().values():
        assert _verify_bytes(data)


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, bytes]:
    scope = draw(st.sampled_from(["full", "session"]))
    data = _bundles()[scope]
    lines = data.splitlines(keepends=True)
    kind = draw(st.sampled_from(["flip", "delete", "swap", "insert", "truncate"]))
    if kind == "flip":
        index = draw(st.integers(0, len(data) - 1))
        mask = draw(st.integers(1, 255))
        mutated = data[:index] + bytes([data[index] ^ mask]) + data[index + 1 :]
    elif kind == "delete":
        index = draw(st.integers(0, len(lines) - 1))
        mutated = b"".join(lines[:index] + lines[index + 1 :])
    elif kind == "swap":
        i = draw(st.integers(0, len(lines) - 2))
        j = draw(st.integers(i + 1, len(lines) - 1))
        lines[i], lines[j] = lines[j], lines[i]
        mutated = b"".join(lines)
    elif kind == "insert":
        index = draw(st.integers(0, len(lines)))
        extra = draw(
            st.one_of(
                st.sampled_from(lines),
                st.binary(max_size=40).map(lambda b: b + b"\n"),
                st.just(b"\n"),
            )
        )
        mutated = b"".join([*lines[:index], extra, *lines[index:]])
    else:
        mutated = data[: draw(st.integers(0, len(data) - 1))]
    return f"{scope}:{kind}", mutated


@IO
@given(case=mutations())
def test_any_single_change_to_a_bundle_is_detected(case: tuple[str, bytes]) -> None:
    label, mutated = case
    assert not _verify_bytes(mutated), label


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_leaf,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=10,
)
payloads = st.dictionaries(
    st.one_of(st.text(max_size=8), st.sampled_from(["token", "api_key", "text"])),
    json_values,
    max_size=5,
)
drafts = st.builds(
    EventDraft,
    kind=st.sampled_from(["tape.status", "run.created", "k"]),
    actor=st.text(max_size=10),
    session_id=st.sampled_from(["", "s1", "s2"]),
    run_id=st.sampled_from(["r1", "r2"]),
    tape=st.booleans(),
    payload=payloads,
    principal=st.text(max_size=10),
    channel=st.text(max_size=5),
    ts_ms=st.integers(0, 2**63 - 1),
)


def _clean_text(value: Any) -> bool:
    try:
        normalize(value)
    except ValueError:
        return False
    return True


@pytest.fixture(params=BACKENDS, scope="module")
def backend(request: pytest.FixtureRequest) -> tuple[str, PostgresServer | None]:
    """Each backend; PostgreSQL's server started once for the run (session-scoped)."""
    if request.param == "postgres":
        return request.param, request.getfixturevalue("postgres_server")
    return request.param, None


@IO
@given(batches=st.lists(st.lists(drafts, min_size=1, max_size=3), min_size=1, max_size=4))
def test_read_after_write_returns_what_was_written(
    backend: tuple[str, PostgresServer | None], batches: list[list[EventDraft]]
) -> None:
    batches = [
        [d for d in b if _clean_text(d.payload) and _clean_text([d.actor, d.principal, d.channel])]
        for b in batches
    ]
    batches = [b for b in batches if b]
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"

        async def run() -> list[Any]:
            config = config_for(*backend, sync=False)
            async with JournalStore.open(data_dir, config=config) as store:
                results = await asyncio.gather(*(store.append(b) for b in batches))
                written = [e for r in results for e in r]
                read = store.read_range(0, 1000)
                assert sorted(written, key=lambda e: e.position) == read
                for batch, stored in zip(batches, results, strict=True):
                    for d, e in zip(batch, stored, strict=True):
                        expected = redact(normalize(d.payload))
                        assert e.payload == expected.value
                        assert tuple(e.redactions) == expected.paths
                        assert (
                            e.kind,
                            e.actor,
                            e.session_id,
                            e.run_id,
                            e.principal,
                            e.channel,
                            e.ts_ms,
                        ) == (
                            d.kind,
                            d.actor,
                            d.session_id,
                            d.run_id,
                            d.principal,
                            d.channel,
                            d.ts_ms or e.ts_ms,
                        )
                        assert (e.tape_seq >= 0) == d.tape
                assert verify_store(store).ok
                return read

        asyncio.run(run())
        export_bundle(data_dir, Path(tmp) / "b.ndjson")
        assert verify_bundle(Path(tmp) / "b.ndjson").ok
