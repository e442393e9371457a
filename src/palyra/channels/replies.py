"""Replies cut to a platform's size limit, by UTF-8 bytes, never inside a character."""

from __future__ import annotations


def split_utf8(text: str, max_bytes: int, prefix: str = "") -> list[str]:
    """``text`` in chunks of at most ``max_bytes`` UTF-8 bytes each, ``prefix`` on every one.

    Cuts prefer a newline, then a space, in the second half of a chunk; a
    character is never split. Without the prefixes the chunks join back to
    ``text`` exactly.

    Raises:
        ValueError: ``prefix`` leaves no room for text.
    """
    room = max_bytes - len(prefix.encode())
    if room < 8:
        raise ValueError("the reply prefix leaves no room for text")
    chunks: list[str] = []
    rest = text
    while rest:
        encoded = rest.encode()
        if len(encoded) <= room:
            chunks.append(rest)
            break
        cut = len(encoded[:room].decode(errors="ignore"))  # whole characters only
        head = rest[:cut]
        for sep in ("\n", " "):
            at = head.rfind(sep)
            if at >= cut // 2:
                cut = at + 1
                break
        chunks.append(rest[:cut])
        rest = rest[cut:]
    return [prefix + chunk for chunk in chunks]
