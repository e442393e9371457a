"""The map rule of readiness: near its limit is a failure only when it cannot grow."""

from __future__ import annotations

import pytest

from palyra.ops.readiness import MAP_NEAR_FULL, map_check

MIB = 1024 * 1024


@pytest.mark.parametrize(("used", "size", "free", "ok"), [
    (10 * MIB, 64 * MIB, 0, True),                          # far from the limit
    (int(64 * MIB * MAP_NEAR_FULL) - 1, 64 * MIB, 0, True),  # just under it
    (61 * MIB, 64 * MIB, 64 * MIB, True),       # past it, the disk holds its doubling
    (61 * MIB, 64 * MIB, 64 * MIB - 1, False),  # past it, no room to grow
    (64 * MIB, 64 * MIB, 0, False),
])
def test_map_near_its_limit_fails_only_without_room_to_grow(used: int, size: int, free: int,
                                                            ok: bool) -> None:
    check = map_check(used, size, free)
    assert check.ok is ok
    assert check.name == "journal_map"
    assert ("no room to grow" in check.detail) is not ok
