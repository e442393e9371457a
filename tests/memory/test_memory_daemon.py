"""``palyra serve`` with ``[memory] embedder = "openai"``: items ingested and searched over
HTTP are embedded by a real endpoint on loopback; while the endpoint is down ingests are
still acknowledged; after a restart the daemon embeds every item again in the background."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from palyra.testing.spawn import DaemonProcess, clean_env
from tests.memory.fake_embeddings import serve_fake_embeddings

pytestmark = pytest.mark.slow

HEADERS = {"x-palyra-principal": "user:alice", "x-palyra-device-id": "01J00000000000000000000000"}


async def test_serve_embeds_through_the_configured_endpoint(tmp_path: Path) -> None:
    with serve_fake_embeddings() as (url, app):
        config = tmp_path / "palyra.toml"
        config.write_text(f'[memory]\nembedder = "openai"\n\n[memory.openai]\nbase_url = "{url}"\n'
                          'model = "fake-embed"\napi_key_env = "FAKE_EMBED_KEY"\nmax_retries = 0\n')
        env = clean_env(PALYRA_CONFIG=str(config), FAKE_EMBED_KEY="sk-daemon")
        data_dir = tmp_path / "data"
        with DaemonProcess(data_dir, env=env) as daemon:
            auth = {**HEADERS, "authorization": f"Bearer {daemon.token}"}
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{daemon.http_port}",
                                         headers=auth) as client:
                made = await client.post("/v1/memory", json={"item": {
                    "text": "the office is in Brno"}})
                assert made.status_code == 200, made.text
                hits = (await client.post("/v1/memory:search", json={"query": "office"})).json()
                assert hits["hits"][0]["item"]["text"] == "the office is in Brno"
                assert all(h["authorization"] == "Bearer sk-daemon" for h, _b in app.requests)
                app.down = True
                down = await client.post("/v1/memory", json={"item": {
                    "text": "the deploy key rotates every Monday"}})
                assert down.status_code == 200, down.text  # acknowledged without a vector
                hits = (await client.post("/v1/memory:search", json={"query": "deploy"})).json()
                assert hits["hits"][0]["item"]["memoryId"] == down.json()["item"]["memoryId"]
            assert "memory embedding failed" in daemon.log()
        app.down = False
        before = len(app.requests)
        wanted = {"the office is in Brno", "the deploy key rotates every Monday"}
        with DaemonProcess(data_dir, env=env) as again:  # every item is embedded again
            for _ in range(400):
                asked = {t for _h, body in app.requests[before:] for t in body["input"]}
                if wanted <= asked:
                    break
                await asyncio.sleep(0.05)
            assert wanted <= asked
            assert "openai:fake-embed" in again.log()
