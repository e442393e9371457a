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


# A real `palyra serve` in the child: once it has published daemon.json (both servers
# bound, the HTTP app built, the journal open), it writes what it has imported and stops.
_SERVING = """
import json, os, signal, sys, threading, time
from pathlib import Path
from palyra.daemon.discovery import read_daemon_info
data, out = Path(sys.argv[1]), Path(sys.argv[2])
def look():
    while (info := read_daemon_info(data)) is None or info.pid != os.getpid():
        time.sleep(0.05)
    out.write_text(json.dumps(sorted(sys.modules)))
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=look, daemon=True).start()
from palyra.cli.main import main
main(["serve", "--data-dir", str(data), "--grpc-port", "0", "--http-port", "0"])
"""

# Installed (by Litestar, rich-click, the MCP SDK, wordllama, uvicorn[standard]) but
# serving nothing in a started daemon: together about 12 MB resident (palyra.imports).
# And what only a configuration asks for: the PostgreSQL driver (``[journal] backend =
# "postgres"``) and libsodium (a Discord channel), about 10 MB more. And what only a
# request asks for: prometheus_client renders ``/metrics`` (about 1.8 MiB), loaded at
# the first scrape (the fold that counts meanwhile is palyra's own). And
# python-statemachine (about 1 MiB): the generated lifecycles' machine classes are
# built at their first use; the engine uses only the pure tables.
_NOT_AT_START = {"rich", "pygments", "pydantic", "pydantic_core", "attrs", "attr", "watchfiles",
                 "psycopg", "nacl", "prometheus_client", "statemachine"}


def test_a_serving_daemon_has_not_imported_what_it_does_not_serve(tmp_path: Path) -> None:
    path = f"{ROOT / 'src'}:{ROOT / 'generated' / 'python'}"
    seen = tmp_path / "modules.json"
    subprocess.run([sys.executable, "-c", _SERVING, str(tmp_path / "data"), str(seen)],
                   capture_output=True, text=True, check=True, timeout=120,
                   env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin",
                        "PALYRA_ADMIN_TOKEN": "start-imports-token"})
    modules = json.loads(seen.read_text())
    assert "palyra.transport.http.app" in modules and "structlog" in modules
    assert sorted({m.split(".")[0] for m in modules} & _NOT_AT_START) == []
    # Litestar imported PyYAML (its /openapi.yaml rendering, off in palyra's app) and pdb
    # (pdb_on_exception, off): bound, not loaded (palyra.imports.DEFERRED); loading them
    # imports yaml's submodules and pdb's bdb.
    assert [m for m in modules if m.startswith("yaml.") or m == "bdb"] == []


_LATER = """
import json, sys
import palyra.cli.main, structlog.dev, betterproto2
absent_at_start = sorted({m.split(".")[0] for m in sys.modules} & {"rich", "pydantic"})
import litestar.openapi.plugins  # imports yaml, deferred (palyra.imports.DEFERRED)
deferred = sorted(m for m in sys.modules if m.startswith("yaml.") or m == "bdb")
import pydantic, rich  # what the MCP SDK, for one, does when an MCP server is configured
import yaml
yaml_text = yaml.safe_dump({"a": [1, 2]})  # the first use loads it whole
import pdb
used = [pdb.Pdb.__name__]
from palyra.config import LogConfig
from palyra.daemon.logs import configure_logging
configure_logging(LogConfig(format="console"))
try:
    1 / 0
except ZeroDivisionError:
    structlog.get_logger().exception("boom")
print(json.dumps({"absent": absent_at_start, "pydantic": pydantic.VERSION,
                  "deferred": deferred, "yaml": yaml_text, "c_yaml": yaml.__with_libyaml__,
                  "used": used,
                  "rich": rich.__name__, "renderer_rich": structlog.dev.rich is not None,
                  "betterproto2_pydantic": betterproto2.pydantic is not None}))
"""


def test_the_blocked_extras_stay_importable_for_whoever_needs_them_later() -> None:
    path = f"{ROOT / 'src'}:{ROOT / 'generated' / 'python'}"
    out = subprocess.run([sys.executable, "-c", _LATER], capture_output=True, text=True,
                         env={"PYTHONPATH": path, "PATH": "/usr/bin:/bin"}, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["absent"] == [] and seen["deferred"] == []
    assert seen["yaml"] == "a:\n- 1\n- 2\n" and seen["c_yaml"]
    assert seen["used"] == ["Pdb"]
    assert seen["pydantic"].startswith("2.") and seen["rich"] == "rich"
    # ... while the libraries imported at start keep their plain fallbacks.
    assert not seen["renderer_rich"] and not seen["betterproto2_pydantic"]
    # The console renderer's tracebacks are the standard library's, as they were.
    assert "Traceback (most recent call last)" in out.stderr and "ZeroDivisionError" in out.stderr
