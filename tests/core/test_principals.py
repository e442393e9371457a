"""The one "is this an operator principal" rule, shared by engine and app."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from palyra.app import _access
from palyra.core.principals import OPERATOR_PREFIXES, is_operator
from palyra.engine import IdentityRec, may_access

SRC = Path(__file__).resolve().parents[2] / "src" / "palyra"


@pytest.mark.parametrize(("principal", "operator"), [
    ("admin:ops", True), ("system:timeout", True), ("admin:", True), ("user:admin", False),
    ("administrator", False), ("admin", False), ("system", False), ("", False),
    ("Admin:ops", False), ("channel:discord", False),
])
def test_is_operator(principal: str, operator: bool) -> None:
    assert is_operator(principal) is operator
    assert may_access(IdentityRec(principal), IdentityRec("user:someone-else")) is operator


def test_engine_and_app_share_the_rule() -> None:
    assert _access.is_operator is is_operator
    assert _access.OPERATOR_PREFIXES is OPERATOR_PREFIXES


@pytest.mark.parametrize("package", ["engine", "app"])
def test_no_second_copy_of_the_prefixes(package: str) -> None:
    # A prefix test written out again (``startswith(("admin:", ...``) is how
    # the two copies drifted apart; only core/principals.py may spell it.
    pattern = re.compile(r"startswith\([^)]*[\"'](?:admin|system):")
    offenders = [str(p.relative_to(SRC)) for p in sorted((SRC / package).rglob("*.py"))
                 if pattern.search(p.read_text())]
    assert offenders == []
