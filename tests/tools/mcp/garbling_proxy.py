"""Runs ``files_server.py`` behind a pipe that injects lines which are not JSON-RPC
into its stdout (the SDK's own server keeps stdout clean, so a test needs this to
send the client malformed messages), or, before the answer of ``flood``, 64 MiB
with no newline. ``python garbling_proxy.py STATE_DIR``."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

SERVER = Path(__file__).with_name("files_server.py")
GARBAGE = b'this is not json-rpc\n{"jsonrpc": "2.0", "bogus": }\n'


def main() -> None:
    child = subprocess.Popen([sys.executable, str(SERVER), *sys.argv[1:]], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    child_in, child_out = child.stdin, child.stdout

    def pump_in() -> None:
        for line in sys.stdin.buffer:
            child_in.write(line)
            child_in.flush()
        child_in.close()

    threading.Thread(target=pump_in, daemon=True).start()
    out = sys.stdout.buffer
    for line in child_out:
        if b"after garbage" in line:
            out.write(GARBAGE)  # just before the answer the test waits for
        if b"after flood" in line:
            chunk = b"x" * (1024 * 1024)
            try:
                for _ in range(64):
                    out.write(chunk)
                out.flush()
            except BrokenPipeError:  # the client stopped reading: what it should do
                sys.exit(0)
        out.write(line)
        out.flush()
    sys.exit(child.wait())


if __name__ == "__main__":
    main()
