"""How a caller names a session: by id, key or label, with reset and require-existing flags."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Selectors:
    """How a caller names a session; empty strings mean absent."""

    session_id: str = ""
    session_key: str = ""
    label: str = ""
    reset: bool = False
    require_existing: bool = False

    def trimmed(self) -> Selectors:
        """Selectors with surrounding whitespace removed."""
        return Selectors(self.session_id.strip(), self.session_key.strip(), self.label.strip(),
                         self.reset, self.require_existing)
