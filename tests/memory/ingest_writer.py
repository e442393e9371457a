"""Child process for the memory SIGKILL test: ingests items until killed.

Usage: ``python ingest_writer.py DATA_DIR EMBEDDER`` with EMBEDDER ``hash`` or
``dead-endpoint`` (an OpenAI-compatible embedder whose port refuses connections, so
every item is stored without a vector). Prints ``ready``, then one memory id per line
after its ingest returned (= acknowledged).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

from palyra.journal import JournalConfig, JournalStore
from palyra.memory.config import OpenAIEmbeddingsConfig
from palyra.memory.embed import Embedder, HashEmbedder
from palyra.memory.remote import OpenAIEmbedder
from palyra.memory.service import Memory


def _dead_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    return port


async def main(data_dir: Path, kind: str) -> None:
    embedder: Embedder = HashEmbedder()
    if kind == "dead-endpoint":
        embedder = OpenAIEmbedder(
            OpenAIEmbeddingsConfig(base_url=f"http://127.0.0.1:{_dead_port()}/v1",
                                   model="m", api_key_env="", timeout_s=1.0, max_retries=0))
    store = JournalStore.open(data_dir, config=JournalConfig(sync=True))
    memory = Memory(store, embedder)
    sys.stdout.write("ready\n")
    i = 0
    while True:
        item = await memory.ingest(
            "user:alice", f"fact number {i} of writer {os.getpid()} about the office in Brno")
        sys.stdout.write(item.memory_id + "\n")
        i += 1


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
