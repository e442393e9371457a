"""What a daemon loads at start: heavy optional packages wait until they are used.

The idle daemon's memory is mostly its imports; each package here costs several
MB resident and serves a feature that is off, or not used yet, in a default daemon
(numpy, about 16 MB, only for memory items: an empty memory never imports it; the
offline tokenizer, about 20 MB, only once a text is counted).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys, tempfile
import palyra.cli.main, palyra.daemon.daemon
from palyra.journal import JournalStore
from palyra.memory.embed import default_embedder
from palyra.memory.service import Memory
from palyra.memory.tokens import token_counter
embedder = default_embedder()
named = token_counter().name  # what input assembly asks on every run
tokenizer_at_start = "tokenizers" in sys.modules
counted = token_counter().count("hello there")
tokenizer_counted = "tokenizers" in sys.modules
with tempfile.TemporaryDirectory() as tmp:  # an empty memory, as the daemon wires it
    store = JournalStore.open(tmp)
    memory = Memory(store, embedder)
    memory.refresh(); memory.status(); memory.owns_any("user:a"); memory.item_count
    store.close()
before = sorted({m.split(".")[0] for m in sys.modules} & {"wordllama", "opentelemetry", "numpy"})
gateway = "websockets.asyncio.client" in sys.modules
vector = embedder.embed(["hello there"])
print(json.dumps({"before": before, "gateway": gateway, "counted": counted, "named": named,
                  "tokenizer": [tokenizer_at_start, tokenizer_counted],
                  "name": embedder.name, "dim": int(vector.shape[1]),
                  "after": "wordllama" in sys.modules}))
"""


def test_the_embedder_tokenizer_numpy_tracing_and_discord_client_load_only_when_used() -> None:
    path = f"{ROOT / 'src'}:{ROOT / 'generated' / 'python'}"
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"}, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"] == [] and not seen["gateway"]
    assert seen["counted"] == 2  # the real tokenizer, read from the wheel's file
    # ... at the first count, not when its name is asked (about 20 MB resident).
    assert seen["named"].startswith("llama-2") and seen["tokenizer"] == [False, True]
    if seen["name"].startswith("wordllama"):  # installed: the first embed loads the model
        assert seen["after"] and seen["dim"] == 128
