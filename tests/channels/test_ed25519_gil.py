"""Discord's Ed25519 check holds the GIL, through PyNaCl's private ``nacl._sodium``.

The twin test the house asks of a speed trick that reads a library's private parts:
PyNaCl is pinned, and an upgrade that stops exporting libsodium's symbols from its
extension fails here (the daemon would fall back to PyNaCl's own verify, correct but
giving the journal writer the GIL in the middle of every admission).
"""

from __future__ import annotations

import pytest
from nacl.signing import SigningKey

from palyra.channels.adapters import _ed25519
from palyra.channels.adapters import discord_interactions as di
from tests.channels._gil import runs_of_a_woken_thread


def test_the_pinned_pynacl_exports_libsodiums_detached_verify() -> None:
    check, holds_gil = _ed25519.verifier()
    assert holds_gil, "nacl._sodium no longer exports crypto_sign_verify_detached"
    assert di.public_key("11" * 32).check is check


@pytest.mark.parametrize("check", [_ed25519.verifier()[0], _ed25519._pynacl],
                         ids=["gil_holding", "pynacl"])
def test_it_agrees_with_pynacl(check: _ed25519.Verifier) -> None:
    key, other = SigningKey.generate(), SigningKey.generate()
    public = key.verify_key.encode()
    for message in (b"", b"1764201600{}", b"x" * 5000):
        good = key.sign(message).signature
        assert check(public, message, good)
        assert not check(public, message + b"!", good)
        assert not check(public, message, other.sign(message).signature)
        assert not check(other.verify_key.encode(), message, good)
        # Sizes libsodium would read past: refused before the call.
        assert not check(public, message, good[:63])
        assert not check(public, message, good + b"\0")
        assert not check(public, message, b"")
        assert not check(public[:31], message, good)


def test_the_check_keeps_the_gil() -> None:
    """A thread woken before each check (as the journal writer is by an admission's
    append) runs during hardly any of them: it waits for the switch interval."""
    check, _ = _ed25519.verifier()
    key = SigningKey.generate()
    public, message = key.verify_key.encode(), b"1764201600" + b"{}" * 300
    signature = key.sign(message).signature

    def one() -> None:
        assert check(public, message, signature)

    checks = 1000
    ran = runs_of_a_woken_thread(one, checks)
    # PyNaCl's own verify (cffi lets go of the GIL): the thread ran during ~all of them.
    assert ran < checks // 4, f"the woken thread ran during {ran} of {checks} checks"
