"""The events of an export bundle, read for ``palyra journal traces`` (not verified here).

Only ``event`` lines matter to a trace; every other line (header, links,
pruned records, checkpoints, seal, trailer) is passed over. ``palyra journal
verify`` is what proves a bundle intact.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from palyra.core.errors import InvalidArgument


class BundleEvent(msgspec.Struct, frozen=True):
    """The header fields and payload of one ``event`` line."""

    position: int
    session_id: str
    run_id: str
    kind: str
    ts_ms: int
    payload: dict[str, Any]
    type: str = "event"


class _Tag(msgspec.Struct):
    type: str


_TAG = msgspec.json.Decoder(_Tag)
_EVENT = msgspec.json.Decoder(BundleEvent)


def bundle_events(path: Path) -> Iterator[BundleEvent]:
    """Every event line of the bundle at ``path``, in file (= journal) order.

    Raises:
        InvalidArgument: a line that is not JSON or an event line missing a field.
    """
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                if _TAG.decode(line).type == "event":
                    yield _EVENT.decode(line)
            except msgspec.DecodeError as exc:
                raise InvalidArgument(f"{path}:{number}: not a bundle line ({exc})") from None
