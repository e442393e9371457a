"""``[journal]`` settings of the transparency log: the origin and the witness keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from palyra.config import load_config
from palyra.core.errors import PalyraError
from palyra.journal.tlog.note import Witness, witnesses

_KEY = "00" * 31 + "01"


def _load(tmp_path: Path, body: str) -> object:
    path = tmp_path / "palyra.toml"
    path.write_text("[journal]\n" + body, encoding="utf-8")
    return load_config(config_file=path, env={}).journal


def test_witnesses_and_origin_are_read(tmp_path: Path) -> None:
    journal = _load(tmp_path, f'tlog_origin = "example.org/log"\n'
                              f'tlog_witnesses = ["w.example/1={_KEY}"]\n')
    assert journal.tlog_origin == "example.org/log"  # type: ignore[attr-defined]
    assert witnesses(journal) == (Witness("w.example/1", bytes.fromhex(_KEY)),)


@pytest.mark.parametrize(("body", "field"), [
    ('tlog_witnesses = ["w.example/1=abc"]\n', "journal.tlog_witnesses"),
    (f'tlog_witnesses = ["w example={_KEY}"]\n', "journal.tlog_witnesses"),
    ('tlog_origin = "has space"\n', "journal.tlog_origin"),
])  # fmt: skip
def test_a_bad_witness_or_origin_is_refused_naming_the_setting(tmp_path: Path, body: str,
                                                                field: str) -> None:
    with pytest.raises(PalyraError) as raised:
        _load(tmp_path, body)
    assert field in raised.value.message
