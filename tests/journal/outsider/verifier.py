"""An outsider's verifier for palyra journals, written from docs/journal/format.md alone.

Nothing here imports palyra: the byte layouts, tags, chain rules and bundle lines are
taken from the doc ("Storage layout", "Record format 2", "Tombstones", "Format 1",
"Hash chain: exact byte layout", "Checkpoints", "Retention: tombstones and the prune
claim", "Bundle format",
"Verifying"). Tools: `lmdb` (read-only), `hashlib`, `struct`, `json`, `msgspec.msgpack`
as a generic MessagePack *decoder*, `cryptography` for Ed25519. The canonical MessagePack
*encoder* a bundle needs (to rebuild a record's body from its JSON lines) is written
here from the doc's "Canonical payload bytes" rules, so the doc's description of it is
tested too.

`verify_data_dir(path)` checks every `_events` record in key order (formats 1, 2, 3),
both chains, the `journal.pruned` claim, compaction digests, the `_checkpoints`
signatures, and (beyond what the journal's own verifier checks) the indexes `_event_ids`,
`_by_session`, `_tape`; `verify_bundle_file(path)` checks an exported bundle. Both return
a `Report`: `ok`, the counts, and on failure the first bad position (as docs/journal/format.md,
"Which position a problem names", says the journal reports it) and a reason. Run it only
on a data dir no writer has open (it opens LMDB without the lock file).

Modules: `_layout` (bytes, tags, hashes, canonical MessagePack), `_walk` (the chain walk
both share), `_store` (live data dir), `_bundle` (bundles), `_covers` (compactions),
`_tlog` (the transparency log: `tlog-proof` files and a data dir's tree, from
"Transparency log").
"""

from __future__ import annotations

from ._bundle import verify_bundle_file
from ._covers import tape_digest
from ._store import verify_data_dir
from ._walk import Bad, Report

__all__ = ["Bad", "Report", "tape_digest", "verify_bundle_file", "verify_data_dir"]
