"""An outsider's verifier for palyra journals, written from docs/journal.md alone.

Nothing here imports palyra: the byte layouts, tags, chain rules and bundle lines are
taken from the doc ("Storage layout", "Record format 2", "Tombstones", "Format 1",
"Hash chain / Exact byte layout", "Checkpoints", "Retention", "Bundle format",
"Verifying"). Tools: `lmdb` (read-only), `hashlib`, `struct`, `json`, `msgspec.msgpack`
as a generic MessagePack *decoder*, `cryptography` for Ed25519. The canonical MessagePack
*encoder* a bundle needs (to rebuild a record's body from its JSON lines) is written
here from the doc's "Canonical payload bytes" rules, so the doc's description of it is
tested too.

`verify_data_dir(path)` and `verify_bundle_file(path)` return a `Report`: `ok`, the
counts, and on failure the first bad position (the first position of the first record
that does not check out, as the doc says the journal reports it) and a reason. Run it
only on a data dir no writer has open (it opens LMDB without the lock file).
"""

from __future__ import annotations

from ._bundle import verify_bundle_file
from ._covers import tape_digest
from ._store import verify_data_dir
from ._walk import Bad, Report

__all__ = ["Bad", "Report", "tape_digest", "verify_bundle_file", "verify_data_dir"]
