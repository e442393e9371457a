"""Entity rows skip the redaction walk only when every free-text field is known clean.

``records.redacted`` returns a run or approval row as it is once its texts were found
clean before (``records._CLEAN``), because rows are written again and again with the
same texts. Each free-text field must still be screened on its own: a row whose other
texts are known clean but one of which holds a secret is redacted.
"""

from __future__ import annotations

import msgspec
import pytest

from palyra.engine.model import records
from palyra.engine.model.records import (
    ApprovalRecord,
    IdentityRec,
    InputRec,
    PromptRec,
    RunRecord,
)
from palyra.engine.run.approvals import approval_write, stored_approval_write

SECRET = "sk-proj-RECORDSECRETaaaaaaaaaaaa"
CLEAN_ARGS = '{"path": "notes.txt"}'
CLEAN_TEXT = "the file has 3 lines"


def _run(**fields: object) -> RunRecord:
    return RunRecord(run_id="r1", session_id="s1", state="in_progress",
                     identity=IdentityRec("user:a"), created_ms=1, updated_ms=1,
                     **fields)  # type: ignore[arg-type]


def _approval(**fields: str) -> ApprovalRecord:
    prompt = PromptRec(title="Run fs.read?", risk_level="low", subject_id="fs.read",
                       summary=fields.pop("summary", CLEAN_TEXT), options=("approve", "deny"),
                       timeout_seconds=60,
                       details_json=fields.pop("details_json", CLEAN_ARGS),
                       policy_explanation=fields.pop("policy_explanation", CLEAN_TEXT))
    return ApprovalRecord(approval_id="a1", session_id="s1", run_id="r1", proposal_id="p1",
                          tool_name="fs.read", args_digest="d", policy_hash="h",
                          risk_level="low", prompt=prompt, state="pending", created_ms=1,
                          expires_at_ms=2, requested_by=IdentityRec("user:a"),
                          args_json=fields.pop("args_json", CLEAN_ARGS),
                          reason=fields.pop("reason", CLEAN_TEXT))


def _stored(record: RunRecord | ApprovalRecord) -> bytes:
    return records.encode(record)


@pytest.fixture(autouse=True)
def _known_clean() -> None:
    # The clean texts as a busy daemon knows them: screened once before.
    for text in (CLEAN_ARGS, CLEAN_TEXT):
        assert records.redact_str(text) == text
        assert text in records._CLEAN


def test_a_clean_run_row_is_kept_as_it_is() -> None:
    run = _run(final_text=CLEAN_TEXT)
    assert records.redacted(run) is run


@pytest.mark.parametrize("field", ["final_text", "error_message"])
def test_a_run_rows_secret_text_is_redacted(field: str) -> None:
    texts = {"final_text": CLEAN_TEXT, "error_message": "", field: f"key {SECRET}"}
    run = _run(**texts)
    assert SECRET.encode() not in _stored(run)
    assert SECRET not in getattr(records.redacted(run), field)


def test_a_queued_inputs_secret_is_redacted() -> None:
    run = _run(final_text=CLEAN_TEXT, pending_inputs=(InputRec("i1", f"use {SECRET}"),))
    assert SECRET.encode() not in _stored(run)


def test_a_clean_approval_row_is_kept_as_it_is() -> None:
    approval = _approval()
    assert records.redacted(approval) is approval


@pytest.mark.parametrize("field", ["args_json", "reason", "summary", "details_json",
                                   "policy_explanation"])
def test_each_approval_text_is_screened_though_the_others_are_known_clean(field: str) -> None:
    value = f'{{"token": "{SECRET}"}}' if field in ("args_json", "details_json") \
        else f"Bearer {SECRET}"
    approval = _approval(**{field: value})
    row = msgspec.msgpack.decode(_stored(approval))
    assert SECRET not in str(row)


@pytest.mark.parametrize("field", ["args_json", "reason", "summary", "details_json",
                                   "policy_explanation", ""])
def test_the_stored_form_is_written_as_the_screened_write_would_write_it(field: str) -> None:
    # The run's hot path redacts an approval once and writes that form as it is
    # (``stored_approval_write``): the row is byte for byte the screened write's.
    approval = _approval(**({field: f'{{"token": "{SECRET}"}}'} if field else {}))
    stored = stored_approval_write(records.redacted(approval))
    assert stored == approval_write(approval)
    assert stored.value is not None and SECRET.encode() not in stored.value
