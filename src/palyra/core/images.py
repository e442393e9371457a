"""Images as bytes: what they are and how big, read from the bytes themselves (pure).

A client's MIME type and file name are never trusted: the type comes from the
magic number, the pixel size from the format's own header. PNG, JPEG, GIF and
WebP are recognised; anything else is refused with a clear error.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct

from palyra.core.errors import InvalidArgument

#: The largest attachment accepted, in bytes.
MAX_ATTACHMENT_BYTES = 5 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class ImageInfo:
    """A sniffed image."""

    sha256: str
    mime_type: str
    width: int
    height: int
    size_bytes: int


def sniff(data: bytes, *, name: str = "") -> ImageInfo:
    """The image's digest, type and pixel size.

    Raises:
        InvalidArgument: empty, over :data:`MAX_ATTACHMENT_BYTES`, not an image of a
            known format, or a header too short to give its size.
    """
    label = f"attachment {name!r}" if name else "attachment"
    if not data:
        raise InvalidArgument(f"{label} is empty", details={"field": "input.attachments"})
    if len(data) > MAX_ATTACHMENT_BYTES:
        raise InvalidArgument(f"{label} is {len(data)} bytes, over the cap of "
                              f"{MAX_ATTACHMENT_BYTES}", details={"field": "input.attachments"})
    mime, size = _kind(data)
    if mime == "":
        raise InvalidArgument(f"{label} is not a PNG, JPEG, GIF or WebP image (its bytes say "
                              "so, whatever its MIME type)", details={"field": "input.attachments"})
    if size is None:
        raise InvalidArgument(f"{label}: a truncated {mime} header",
                              details={"field": "input.attachments"})
    return ImageInfo(hashlib.sha256(data).hexdigest(), mime, size[0], size[1], len(data))


def _kind(data: bytes) -> tuple[str, tuple[int, int] | None]:
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        if len(data) >= 24 and data[12:16] == b"IHDR":
            return "image/png", struct.unpack(">II", data[16:24])
        return "image/png", None
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif", struct.unpack("<HH", data[6:10]) if len(data) >= 10 else None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", _webp_size(data)
    if data.startswith(b"\xff\xd8"):
        return "image/jpeg", _jpeg_size(data)
    return "", None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8 " and len(data) >= 30:
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X" and len(data) >= 30:
        return (int.from_bytes(data[24:27], "little") + 1,
                int.from_bytes(data[27:30], "little") + 1)
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    # Walk the segments to the first start-of-frame marker (SOF0..SOF15 but DHT, JPG, DAC).
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            if i + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        i += 2 + length
    return None
