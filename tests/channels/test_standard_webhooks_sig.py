"""Standard Webhooks' ``v1`` signatures against the reference library (``standardwebhooks``),
and the strict base64 the check decodes with, against ``b64decode(validate=True)``."""

from __future__ import annotations

import base64
import binascii
import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from standardwebhooks import Webhook

from palyra.channels.adapters import standard_webhooks as sw
from palyra.core.errors import PalyraError
from tests.channels._gil import runs_of_a_woken_thread

_SECRETS = ["whsec_" + base64.b64encode(bytes([i]) * 24).decode() for i in range(1, 4)]


@given(st.sampled_from(_SECRETS), st.text(min_size=1, max_size=40).filter(str.isprintable),
       st.binary(max_size=200))
def test_v1_signs_and_verifies_as_the_reference(secret: str, body_text: str,
                                                pad: bytes) -> None:
    body = (body_text + pad.hex()).encode()
    stamp = 1_700_000_000
    ref = Webhook(secret).sign("msg_1", dt.datetime.fromtimestamp(stamp, dt.UTC), body.decode())
    assert sw.sign(secret, "msg_1", stamp, body) == ref
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(stamp), "webhook-signature": ref}
    others = [s for s in _SECRETS if s != secret]
    assert sw.verify([*others, secret], headers, body, now_s=stamp) == "msg_1"
    with pytest.raises(PalyraError):  # not under another key
        sw.verify(others, headers, body, now_s=stamp)
    with pytest.raises(PalyraError):  # nor of another body
        sw.verify([secret], headers, body + b".", now_s=stamp)


def _b64(s: str) -> bytes | None:
    try:
        return base64.b64decode(s, validate=True)
    except (binascii.Error, ValueError):
        return None


def _strict(s: str) -> bytes | None:
    try:
        return binascii.a2b_base64(s, strict_mode=True)
    except (binascii.Error, ValueError):
        return None


@given(st.one_of(st.text(alphabet="ABCab01+/=_- \n\u00e9", max_size=12),
                 st.binary(max_size=9).map(lambda b: base64.b64encode(b).decode())))
def test_strict_base64_is_b64decode_validate(s: str) -> None:
    """What the check decodes a signature (and a key) with: one C call, the same
    answer and the same refusals as ``b64decode(validate=True)`` (held to the stdlib)."""
    assert _strict(s) == _b64(s)


def test_a_bad_key_is_refused_each_time() -> None:
    """The decoded key is cached; a key that is not base64 is refused, not cached."""
    for _ in range(2):
        with pytest.raises(ValueError, match="whsec_ key must be base64"):
            sw.sign("whsec_not*base64", "m", 1, b"x")


def test_the_v1_check_keeps_the_gil() -> None:
    """A thread woken before each check (as the journal writer is by an admission's
    append) runs during hardly any of them: the HMAC of a usual delivery is taken
    holding the GIL (hmac.digest, OpenSSL's one-shot, lets go of it every call)."""
    secret, stamp = _SECRETS[0], 1_700_000_000
    body = b'{"type":"message.created","data":{"text":"' + b"x" * 600 + b'"}}'
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(stamp),
               "webhook-signature": sw.sign(secret, "msg_1", stamp, body)}

    def one() -> None:
        assert sw.verify([secret], headers, body, now_s=stamp) == "msg_1"

    checks = 3000
    ran = runs_of_a_woken_thread(one, checks)
    # hmac.digest: the thread ran during ~10 % of them; holding the GIL, ~0.
    assert ran < checks // 100, f"the woken thread ran during {ran} of {checks} checks"
