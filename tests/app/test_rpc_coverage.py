"""Every RPC of the spec is served by the application, and nothing else is public.

The seam is ``palyra_gen.services`` (generated from the spec): one Protocol per
service. mypy checks ``PalyraApp`` against it (``palyra.app._facade.serves_the_spec``);
these tests check the same at run time from the other side, and prove the type
check bites: a misspelt method is a mypy error, not a silent UNIMPLEMENTED.
"""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest
from palyra_gen.services import RPCS, STREAMING, UNARY

from palyra.app import PalyraApp

ROOT = Path(__file__).resolve().parents[2]


def _public_methods() -> set[str]:
    return {name for name, value in inspect.getmembers(PalyraApp)
            if not name.startswith("_") and callable(value)}


def test_every_rpc_in_the_spec_is_served() -> None:
    served = _public_methods()
    missing = [f"{r.service}.{r.method} ({r.python_method})" for r in RPCS
               if r.python_method not in served]
    assert not missing, missing
    for rpc in RPCS:
        method = getattr(PalyraApp, rpc.python_method)
        streaming = rpc.client_streaming or rpc.server_streaming
        assert (inspect.isasyncgenfunction(method) if streaming
                else inspect.iscoroutinefunction(method)), rpc.python_method
        assert (rpc.python_method in STREAMING) is streaming
        assert (rpc.python_method in UNARY) is not streaming


def test_every_public_app_method_is_an_rpc() -> None:
    rpcs = {r.python_method for r in RPCS}
    extra = sorted(_public_methods() - rpcs)
    assert not extra, f"public methods that are no RPC of the spec: {extra}"


@pytest.mark.slow
def test_mypy_rejects_an_app_with_a_misspelt_method(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "misspelt.py"
    snippet.write_text(textwrap.dedent('''
        from collections.abc import AsyncIterator

        from palyra_gen.palyra import v1
        from palyra_gen.services import JournalServiceApp

        class Journal:
            async def verify_journal(self, ctx: int, request: v1.VerifyJournalRequest) -> v1.VerifyJournalResponse: ...
            def watch_journal_verify(self, ctx: int, request: v1.WatchJournalVerifyRequest) -> AsyncIterator[v1.WatchJournalVerifyResponse]: ...
            def export_jornal(self, ctx: int, request: v1.ExportJournalRequest) -> AsyncIterator[v1.ExportJournalResponse]: ...
            async def get_journal_head(self, ctx: int, request: v1.GetJournalHeadRequest) -> v1.GetJournalHeadResponse: ...
            async def create_checkpoint(self, ctx: int, request: v1.CreateCheckpointRequest) -> v1.CreateCheckpointResponse: ...
            async def prune_journal(self, ctx: int, request: v1.PruneJournalRequest) -> v1.PruneJournalResponse: ...
            async def get_tree_checkpoint(self, ctx: int, request: v1.GetTreeCheckpointRequest) -> v1.GetTreeCheckpointResponse: ...
            async def prove_entry(self, ctx: int, request: v1.ProveEntryRequest) -> v1.ProveEntryResponse: ...
            async def prove_consistency(self, ctx: int, request: v1.ProveConsistencyRequest) -> v1.ProveConsistencyResponse: ...
            async def get_tree_tile(self, ctx: int, request: v1.GetTreeTileRequest) -> v1.GetTreeTileResponse: ...
            async def add_cosignatures(self, ctx: int, request: v1.AddCosignaturesRequest) -> v1.AddCosignaturesResponse: ...

        def serve(app: JournalServiceApp[int]) -> None: ...

        serve(Journal())
    '''))
    out, _err, status = api.run([str(snippet), "--strict", "--no-incremental",
                                 "--cache-dir", str(tmp_path / "cache"),
                                 "--config-file", str(ROOT / "pyproject.toml")])
    assert status == 1, out
    assert 'missing following "JournalServiceApp" protocol member' in out, out
    assert "export_journal" in out, out
