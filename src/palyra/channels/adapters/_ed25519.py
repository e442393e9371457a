"""Ed25519 verification of Discord's interactions, keeping the interpreter lock.

Both PyNaCl's verify (cffi) and ``cryptography``'s let go of the GIL for the 40-80 us
of the check. On the daemon's event loop that is worse than useless: the loop waits for
the answer anyway, and the thread that takes the GIL meanwhile is the journal writer's,
woken by the admissions queued just before, which then commits a smaller group. With 16
interactions in flight Discord's ingest took 0.8 journal commits per message against
0.4 for the adapters without an Ed25519 check (``bench ingress``), and the extra
commits' CPU on the writer's and the commit log's threads with them.

So the check calls libsodium's ``crypto_sign_verify_detached`` through
:class:`ctypes.PyDLL`, which holds the GIL across a foreign call, in the libsodium
PyNaCl ships: its ``nacl._sodium`` extension links libsodium in and exports its
symbols. That reads a private module of PyNaCl's, which is pinned in pyproject.toml;
``tests/channels/test_ed25519_gil.py`` fails on an upgrade that stops exporting the
symbol (or starts releasing the GIL here). Without the symbol the check falls back to
PyNaCl's own ``VerifyKey.verify``: slower for the journal, never wrong.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable

PUBLIC_KEY_BYTES, SIGNATURE_BYTES = 32, 64

Verifier = Callable[[bytes, bytes, bytes], bool]
"""``(public_key, message, signature)`` -> whether the signature verifies."""


def _gil_holding() -> Verifier | None:
    """libsodium's detached verify called with the GIL held, or None if not exported."""
    # nacl.bindings' import runs sodium_init(), which libsodium needs before any call.
    import nacl._sodium  # type: ignore[import-not-found]  # a cffi extension, no stubs
    import nacl.bindings

    try:
        fn = ctypes.PyDLL(nacl._sodium.__file__).crypto_sign_verify_detached
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulonglong, ctypes.c_char_p]
    fn.restype = ctypes.c_int

    def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
        # libsodium reads exactly 64 and 32 bytes behind these pointers: sizes first.
        if len(signature) != SIGNATURE_BYTES or len(public_key) != PUBLIC_KEY_BYTES:
            return False
        return bool(fn(signature, message, len(message), public_key) == 0)

    return verify


def _pynacl(public_key: bytes, message: bytes, signature: bytes) -> bool:
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    try:
        VerifyKey(public_key).verify(message, signature)
    except (BadSignatureError, ValueError):  # ValueError: not 64 bytes
        return False
    return True


@functools.cache
def verifier() -> tuple[Verifier, bool]:
    """The Ed25519 check to use, and whether it holds the GIL (False: PyNaCl's own).

    Imported and built only when a Discord application is configured: a daemon without
    one keeps libsodium out of its memory.
    """
    fast = _gil_holding()
    return (fast, True) if fast is not None else (_pynacl, False)
