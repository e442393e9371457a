"""The ed25519 checkpoint key of a data dir."""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

from palyra.core.errors import ErrorCode, PalyraError

KEY_FILE = "checkpoint_ed25519.key"
"""Raw 32-byte ed25519 seed, mode 0600, next to the LMDB files."""


class Signer:
    """Signs checkpoint messages with one ed25519 key."""

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = private_key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    def sign(self, message: bytes) -> bytes:
        """64-byte ed25519 signature of ``message``."""
        return self._key.sign(message)

    @classmethod
    def load(cls, directory: Path) -> Signer | None:
        """The key in ``directory`` if there is a readable one (never creates it)."""
        try:
            seed = (directory / KEY_FILE).read_bytes()
        except OSError:
            return None
        return cls(Ed25519PrivateKey.from_private_bytes(seed)) if len(seed) == 32 else None

    @classmethod
    def load_or_create(cls, directory: Path) -> Signer:
        """Load the key in ``directory``, generating it (0600) on first use.

        Raises:
            PalyraError: ``JOURNAL_CORRUPT`` when the key file is not a 32-byte seed.
        """
        path = directory / KEY_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            seed = path.read_bytes()
            if len(seed) != 32:
                raise PalyraError(
                    f"checkpoint key {path} is damaged (expected 32 bytes)",
                    code=ErrorCode.JOURNAL_CORRUPT,
                ) from None
            return cls(Ed25519PrivateKey.from_private_bytes(seed))
        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        try:
            os.write(fd, seed)
            os.fsync(fd)
        finally:
            os.close(fd)
        return cls(key)


def signature_valid(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` is ``public_key``'s ed25519 signature of ``message``."""
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True
