"""The attachment store's sniffing: type and pixel size from the bytes, checked against
Pillow's own encoders."""

from __future__ import annotations

import hashlib
import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from palyra.core.errors import ErrorCode, PalyraError
from palyra.core.images import MAX_ATTACHMENT_BYTES, sniff

FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}


def encode(fmt: str, width: int, height: int, **options: object) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 90)).save(out, fmt, **options)
    return out.getvalue()


@given(st.sampled_from(sorted(FORMATS)), st.integers(1, 300), st.integers(1, 300))
def test_type_and_size_come_from_the_bytes(fmt: str, width: int, height: int) -> None:
    data = encode(fmt, width, height)
    info = sniff(data, name="photo.txt")  # the name says nothing
    assert (info.mime_type, info.width, info.height) == (FORMATS[fmt], width, height)
    assert info.sha256 == hashlib.sha256(data).hexdigest() and info.size_bytes == len(data)


def test_webp_lossless_and_progressive_jpeg() -> None:
    lossless = sniff(encode("WEBP", 17, 9, lossless=True))
    assert (lossless.mime_type, lossless.width, lossless.height) == ("image/webp", 17, 9)
    progressive = sniff(encode("JPEG", 33, 21, progressive=True))
    assert (progressive.width, progressive.height) == (33, 21)


@pytest.mark.parametrize(("data", "problem"), [
    (b"", "empty"),
    (b"%PDF-1.7 not an image", "not a PNG, JPEG, GIF or WebP"),
    (b"\\x89PNG\\r\\n\\x1a\\n".decode("unicode_escape").encode("latin-1"), "truncated"),
    (b"\xff\xd8" + b"\x00" * (MAX_ATTACHMENT_BYTES), "over the cap"),
])
def test_what_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(PalyraError) as refused:
        sniff(data)
    assert refused.value.code is ErrorCode.INVALID_ARGUMENT and problem in refused.value.message
