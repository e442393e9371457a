"""Start-up validation: bad policy files fail naming file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from palyra.core.errors import ErrorCode, PalyraError
from palyra.policy import PolicyConfig, PolicyGate
from palyra.policy._loader import parse_error_line, statement_starts


def _load_with(tmp_path: Path, name: str, text: str) -> PalyraError:
    (tmp_path / "policies").mkdir(exist_ok=True)
    (tmp_path / "policies" / name).write_text(text)
    with pytest.raises(PalyraError) as failed:
        PolicyGate.load(PolicyConfig(config_dir=tmp_path))
    assert failed.value.code is ErrorCode.POLICY_INVALID
    return failed.value


GOOD = "// fine\npermit (principal, action, resource);\n\n"


def test_parse_error_names_file_and_line(tmp_path: Path) -> None:
    text = GOOD + "permit (principal, action, resource)\nwhen { context.approved &&& true };\n"
    error = _load_with(tmp_path, "broken.cedar", text)
    assert error.message.startswith("policy file policies/broken.cedar line 5: parse error:")


def test_parse_error_missing_semicolon(tmp_path: Path) -> None:
    text = GOOD + "permit (principal, action, resource)\n\npermit (principal, action, resource);\n"
    error = _load_with(tmp_path, "nosemi.cedar", text)
    assert "policies/nosemi.cedar line 6" in error.message


def test_unknown_context_attribute_names_line(tmp_path: Path) -> None:
    text = (
        GOOD
        + '@id("mine")\n'
        + 'permit (principal, action == Action::"tool.execute", resource)\n'
        + "when { context.nope };\n"
    )
    error = _load_with(tmp_path, "typo.cedar", text)
    assert "policy file policies/typo.cedar line 4:" in error.message
    assert "nope" in error.message


def test_unknown_entity_type_names_line(tmp_path: Path) -> None:
    text = 'permit (principal == User::"x", action, resource);\n'
    error = _load_with(tmp_path, "types.cedar", text)
    assert "policies/types.cedar line 1:" in error.message


def test_duplicate_ids_rejected(tmp_path: Path) -> None:
    text = '@id("palyra.tools.permit_registered")\npermit (principal, action, resource);\n'
    error = _load_with(tmp_path, "dup.cedar", text)
    assert "duplicate policy id 'palyra.tools.permit_registered'" in error.message


def test_templates_rejected(tmp_path: Path) -> None:
    text = "permit (principal == ?principal, action, resource);\n"
    error = _load_with(tmp_path, "tmpl.cedar", text)
    assert "templates are not supported" in error.message


def test_statement_scanner_skips_comments_and_strings() -> None:
    text = (
        "// a; comment\n"
        '@id("x;y")\n'
        'permit (principal, action, resource) when { "a\\";" == "b" };\n'
        "  forbid (principal, action, resource);\n"
    )
    starts = statement_starts(text)
    assert [text[s : s + 6] for s in starts] == ['@id("x', "forbid"]


def test_parse_error_line_at_end_when_only_truncated() -> None:
    assert parse_error_line("permit (principal,\naction,\n") == 2
