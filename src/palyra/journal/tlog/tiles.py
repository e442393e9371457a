"""``tlog-tiles`` resource paths: ``tile/<L>/<N>[.p/<W>]`` and ``tile/entries/<N>[.p/<W>]``; pure."""

from __future__ import annotations

from dataclasses import dataclass

from palyra.journal.tlog.merkle import TILE_WIDTH

ENTRIES = -1
"""The level of an entry bundle (``tile/entries/…``)."""
_MAX_LEVEL = 63


@dataclass(frozen=True, slots=True)
class TilePath:
    """One tile: its level (:data:`ENTRIES` for an entry bundle), index and width."""

    level: int
    index: int
    width: int = TILE_WIDTH

    def path(self) -> str:
        """The path below the log's prefix, as ``tlog-tiles`` spells it."""
        level = "entries" if self.level == ENTRIES else str(self.level)
        digits = f"{self.index:d}"
        groups = []
        while True:  # 3-digit groups, all but the last prefixed "x"
            digits, tail = digits[:-3], digits[-3:]
            groups.append(tail.rjust(3, "0"))
            if not digits:
                break
        index = "/".join(f"x{g}" for g in reversed(groups[1:])) + ("/" if len(groups) > 1 else "")
        suffix = "" if self.width == TILE_WIDTH else f".p/{self.width}"
        return f"tile/{level}/{index}{groups[0]}{suffix}"


def parse_tile_path(path: str) -> TilePath:
    """The tile a ``tile/…`` path names.

    Raises:
        ValueError: the path does not follow ``tlog-tiles``.
    """
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "tile":
        raise ValueError(f"{path!r} is not a tile path")
    level_text, rest = parts[1], parts[2:]
    if level_text == "entries":
        level = ENTRIES
    elif _decimal(level_text) and int(level_text) <= _MAX_LEVEL:
        level = int(level_text)
    else:
        raise ValueError(f"tile level {level_text!r} is not 0..63")
    width = TILE_WIDTH
    if len(rest) >= 2 and rest[-2].endswith(".p"):
        width_text = rest[-1]
        if not _decimal(width_text) or not 1 <= int(width_text) < TILE_WIDTH:
            raise ValueError(f"partial tile width {width_text!r} is not 1..255")
        width = int(width_text)
        rest = [*rest[:-2], rest[-2][:-2]]
    if any(len(p) != 4 or p[0] != "x" or not p[1:].isdigit() for p in rest[:-1]) or not (
        len(rest[-1]) == 3 and rest[-1].isdigit()
    ):
        raise ValueError(f"tile index {'/'.join(rest)!r} is not in 3-digit x-prefixed groups")
    index = int("".join(p.lstrip("x") for p in rest))
    if TilePath(level, index, width).path() != path:
        raise ValueError(f"{path!r} is not the canonical spelling of its tile")
    return TilePath(level, index, width)


def _decimal(text: str) -> bool:
    return text.isascii() and text.isdigit() and (text == "0" or not text.startswith("0"))
