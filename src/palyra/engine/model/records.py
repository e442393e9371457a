"""Durable entity records of the engine: sessions, runs, approvals.

Records are msgspec Structs encoded as MessagePack and written with
``EntityWrite`` in the same append as the event that changed them. Each
carries a schema version ``v`` so a later release can migrate on read;
unknown fields are ignored on decode (forward compatible), missing fields take
their defaults (backward compatible).

States are stored as the lifecycle YAML names (``in_progress``), the same
strings as ``palyra_gen.lifecycle.*`` StateIds.

Free text in a record (a run's final answer, error and queued inputs; an
approval's arguments, prompt and reason) is redacted by :func:`encode` with
``palyra.core.redaction`` exactly as the journal redacts the same text on the
tape, so a secret the tape hides is not kept in an entity row either. The
in-memory records a live run works with stay exact (the tool runs with the
real arguments); what is durable, and what a client reads back, is redacted.
Ids, keys and digests are never touched: ``args_digest`` is computed over the
exact arguments before anything is redacted, which keeps the approval bound to
the exact call.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from palyra.core.redaction import redact
from palyra.usage.model import Tally

RECORD_VERSION = 1

SESSIONS = "sessions"
RUNS = "runs"
APPROVALS = "approvals"


class IdentityRec(msgspec.Struct, frozen=True):
    """Who: principal, device and channel, from authenticated headers."""

    principal: str = ""
    device_id: str = ""
    channel: str = ""


class AttachmentRec(msgspec.Struct, frozen=True):
    """An attachment in the store (``palyra.v1.AttachmentRef``): sniffed, not as told."""

    sha256: str
    mime_type: str
    width: int = 0
    height: int = 0
    size_bytes: int = 0
    name: str = ""


class InputRec(msgspec.Struct, frozen=True):
    """A user input waiting for the agent loop (durable until taped)."""

    input_id: str
    text: str
    attachment_count: int = 0
    attachments: tuple[AttachmentRec, ...] = ()


class GrantRec(msgspec.Struct, frozen=True):
    """A cached session/timeboxed approval decision for one tool + args digest.

    ``expires_at_ms`` is 0 for a session grant (valid until reset/cleanup).
    """

    approval_id: str
    tool_name: str
    args_digest: str
    approved: bool
    scope: str
    expires_at_ms: int = 0
    decided_by: str = ""


class SessionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation, bound to the identity that created it."""

    v: int = RECORD_VERSION
    session_id: str
    session_key: str
    label: str = ""
    identity: IdentityRec
    created_ms: int
    updated_ms: int
    last_run_id: str = ""
    archived: bool = False
    branch_state: str = "root"
    parent_session_id: str = ""
    origin_run_id: str = ""
    run_count: int = 0
    tool_postures: dict[str, str] = {}
    grants: dict[str, GrantRec] = {}


class RunRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One run's current state; the tape holds its history.

    Attributes:
        driver: ``stream`` (RunStream: done on half-close) or ``api``
            (CreateRun/SendRunInput/CompleteRun).
        pending_inputs: inputs accepted but not yet taped as ``user_input``;
            durable so that a restart does not lose them.
        complete_requested: the client half-closed (or asked to complete);
            the run becomes done once its queue is empty and the loop idle.
        last_active_ms: when the run last did something (every commit but
            the recovery marker: an input, a loop step, a decision). The
            idle-run policy (``EngineConfig.idle_complete_s``) counts from
            here; 0 on rows written before it existed (``updated_ms`` then).
    """

    v: int = RECORD_VERSION
    run_id: str
    session_id: str
    state: str
    identity: IdentityRec
    created_ms: int
    updated_ms: int
    tape_len: int = 0
    turn_count: int = 0
    tool_call_count: int = 0
    pending_approval_id: str = ""
    end_reason: str = ""
    error_code: str = ""
    error_message: str = ""
    final_text: str = ""
    driver: str = "api"
    pending_inputs: tuple[InputRec, ...] = ()
    complete_requested: bool = False
    # The session's run before this one (input assembly reads its conversation).
    previous_run_id: str = ""
    # The agent serving the run, and its tool postures as they were at the start
    # (under the session's own overrides).
    agent_id: str = ""
    agent_postures: dict[str, str] = {}
    last_active_ms: int = 0
    # Where the run's model calls go, fixed at its start from its agent: targets
    # ``provider`` or ``provider/model``, the primary first, then its fallbacks
    # (empty: the default provider); and whether answers may come from the cache.
    model_route: tuple[str, ...] = ()
    response_cache: bool = False
    # The run's model usage so far (each call's share lands in the commit that tapes it).
    usage: Tally = Tally()
    # Delegation: the run that started this one, its depth below a top-level run, and
    # the tokens (input + output) it may use in all (0: no cap of its own).
    parent_run_id: str = ""
    delegation_depth: int = 0
    token_budget: int = 0


class PromptRec(msgspec.Struct, frozen=True, kw_only=True):
    """What a human is asked (``palyra.v1.ApprovalPrompt``)."""

    title: str
    risk_level: str
    subject_id: str
    summary: str
    options: tuple[str, ...]
    timeout_seconds: int
    details_json: str = ""
    policy_explanation: str = ""


class ApprovalRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A durable approval bound to one exact tool call."""

    v: int = RECORD_VERSION
    approval_id: str
    session_id: str
    run_id: str
    proposal_id: str
    tool_name: str
    args_digest: str
    args_json: str
    policy_hash: str
    risk_level: str
    prompt: PromptRec
    state: str
    scope: str = ""
    created_ms: int
    expires_at_ms: int
    decided_by: str = ""
    decided_at_ms: int = 0
    reason: str = ""
    ttl_seconds: int = 0
    requested_by: IdentityRec


_ENCODER = msgspec.msgpack.Encoder()
R = TypeVar("R", SessionRecord, RunRecord, ApprovalRecord)
AnyRecord = TypeVar("AnyRecord", bound=SessionRecord | RunRecord | ApprovalRecord)


def encode(record: SessionRecord | RunRecord | ApprovalRecord) -> bytes:
    """MessagePack bytes of ``record`` for an ``EntityWrite`` (free text redacted)."""
    return _ENCODER.encode(redacted(record))


def encode_stored(record: ApprovalRecord) -> bytes:
    """MessagePack bytes of ``record``, which is already in its stored form: the
    value ``redacted`` returned, which it would return again unchanged."""
    return _ENCODER.encode(record)


# Strings known to redact to themselves (an insertion-ordered set, oldest
# evicted first). A record is redacted each time it is written or returned,
# and an approval's arguments, prompt and explanation do not change between
# its request, its decision and the decider's answer: each is scanned once.
# Only clean strings are remembered, so no secret is kept here.
_CLEAN: dict[str, None] = {}
_CLEAN_MAX_ENTRIES = 1024
_CLEAN_MAX_CHARS = 4096  # bounds the memo at ~4 MiB of text


def redact_str(text: str) -> str:
    """``text`` as the journal stores it on the tape (secrets hidden, content kept).

    The same ``redact`` the journal applies to a tape payload's string field,
    so a JSON string (tool arguments) has its secret *keys* hidden too.
    """
    if not text or text in _CLEAN:
        return text
    value = redact(text).value
    if not isinstance(value, str) or value == text:
        if len(text) <= _CLEAN_MAX_CHARS:
            if len(_CLEAN) >= _CLEAN_MAX_ENTRIES:
                del _CLEAN[next(iter(_CLEAN))]
            _CLEAN[text] = None
        return text
    return value


def redacted(record: AnyRecord) -> AnyRecord:
    """``record`` with its free-text fields redacted (the form that is stored).

    Idempotent and cheap when there is nothing to hide (the same object back).
    """
    if isinstance(record, RunRecord):
        return _redacted_run(record)  # type: ignore[return-value]
    if isinstance(record, ApprovalRecord):
        return _redacted_approval(record)  # type: ignore[return-value]
    return record  # sessions hold ids, keys and labels: names, not content


def _redacted_run(record: RunRecord) -> RunRecord:
    # The usual row, written by every step: no queued input and no text, or text known
    # clean; the same object back without the generic walk below.
    if not record.pending_inputs and not record.error_message and (
            not record.final_text or record.final_text in _CLEAN):
        return record
    inputs = tuple(i if (t := redact_str(i.text)) == i.text
                   else msgspec.structs.replace(i, text=t) for i in record.pending_inputs)
    changes = _changed(record, ("final_text", "error_message"))
    if any(a is not b for a, b in zip(inputs, record.pending_inputs, strict=True)):
        changes["pending_inputs"] = inputs
    return msgspec.structs.replace(record, **changes) if changes else record


def _redacted_approval(record: ApprovalRecord) -> ApprovalRecord:
    # An approval is redacted at its request, its decision and each answer about it, and
    # its texts do not change in between: once they are known clean, the record is kept.
    prompt, clean = record.prompt, _CLEAN
    if ((not record.args_json or record.args_json in clean)
            and (not record.reason or record.reason in clean)
            and (not prompt.summary or prompt.summary in clean)
            and (not prompt.details_json or prompt.details_json in clean)
            and (not prompt.policy_explanation or prompt.policy_explanation in clean)):
        return record
    changes: dict[str, object] = _changed(record, ("args_json", "reason"))
    prompt_changes = _changed(record.prompt, ("summary", "details_json", "policy_explanation"))
    if prompt_changes:
        changes["prompt"] = msgspec.structs.replace(record.prompt, **prompt_changes)
    return msgspec.structs.replace(record, **changes) if changes else record


def _changed(obj: msgspec.Struct, fields: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in fields:
        text = getattr(obj, name)
        hidden = redact_str(text)
        if hidden != text:
            out[name] = hidden
    return out


def decode(kind: type[R], data: bytes) -> R:
    """Decode an entity value written by :func:`encode`."""
    return msgspec.msgpack.decode(data, type=kind)


def session_key(session_id: str) -> str:
    """Entity key of a session record."""
    return f"id:{session_id}"


def session_index_key(key: str) -> str:
    """Entity key mapping a session key to its session id."""
    return f"key:{key}"


def grant_key(tool_name: str, args_digest: str) -> str:
    """Key of a cached decision inside ``SessionRecord.grants``."""
    return f"{tool_name}\x1f{args_digest}"
