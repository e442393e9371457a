"""Frozen copy of palyra.core.redaction at 831e574, plus the argv flag rule of issue 12
(test oracle, do not optimise).

The property tests in ``test_redaction_oracle.py`` check that the optimised
module returns exactly what this one does.
"""

# ruff: noqa
# mypy: ignore-errors

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from typing import Any

import msgspec

REDACTED = "<redacted>"

# Substrings of a key, lowercased with separators removed, that mark a secret.
_SECRET_KEY_PARTS = (
    "secret",
    "password",
    "passwd",
    "passphrase",
    "apikey",
    "authorization",
    "cookie",
    "credential",
    "privatekey",
    "accesskey",
    "signingkey",
    "encryptionkey",
    "pincode",
    "pairingcode",
)
# ``<qualifier>_token`` is a credential; a bare ``token`` is model output.
_TOKEN_QUALIFIERS = frozenset(
    {
        "access",
        "refresh",
        "id",
        "auth",
        "session",
        "bearer",
        "api",
        "csrf",
        "xsrf",
        "oauth",
        "bot",
        "app",
        "admin",
        "connector",
        "client",
        "device",
        "pairing",
        "github",
        "slack",
        "personal",
        "security",
    }
)
_JOINED_TOKEN_KEYS = frozenset(q + "token" for q in _TOKEN_QUALIFIERS)
_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# (pattern, number of leading groups kept). Token-shaped runs never contain
# ``<``, so a span already replaced by ``<redacted>`` does not match again.
_SPAN_PATTERNS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:(?!-----END)[\s\S])*"
            r"(?:-----END [A-Z0-9 ]*PRIVATE KEY-----)?"
        ),
        False,
    ),
    (
        re.compile(
            r"(?i)\b((?:proxy-)?authorization\s*+:\s*+|(?:set-)?cookie\s*+:\s*+)"
            r"(?!<redacted>(?:[\r\n]|$))[^\r\n]+"
        ),
        True,
    ),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]{8,}=*"), True),
    (
        re.compile(
            r"(?i)(?<![A-Za-z0-9])((?:token|secret|api[_-]?key|apikey|password|passwd|pwd"
            r"|access[_-]?key|client[_-]?secret)=)[^\s&\"'<>,;]+"
        ),
        True,
    ),
    (
        re.compile(
            r"(?i)(?<![A-Za-z0-9-])(--?(?:token|secret|api[_-]?key|apikey|password|passwd|pwd"
            r"|access[_-]?key|client[_-]?secret)[ \t]+)[^\s&\"'<>,;]+"
        ),
        True,
    ),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{12,}"), False),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), False),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{20,})"), False),
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), False),
    (re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), False),
)
# Every span pattern needs one of these (lowercased) substrings; text without
# any of them is returned untouched without running the patterns.
_TRIGGERS = (
    "private key", "authorization", "cookie", "bearer", "=", "-", "sk-", "akia", "asia", "gh",
    "github_pat_", "xox", "eyj",
)  # fmt: skip
# A flag whose next argv item is its secret value (``--password VALUE``): the
# same names as the ``name=value`` pattern, with one or two leading dashes.
_SECRET_FLAG = re.compile(
    r"(?i)--?(?:token|secret|api[_-]?key|apikey|password|passwd|pwd|access[_-]?key"
    r"|client[_-]?secret)"
)
_MAX_ROUNDS = 4
_MAX_JSON_DEPTH = 4


@dataclass(frozen=True, slots=True)
class Redaction:
    """Result of :func:`redact`: the redacted value and the changed paths."""

    value: Any
    paths: tuple[str, ...]


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """True when a value stored under ``key`` is a credential (memoised: keys repeat)."""
    words = [w.lower() for w in _WORD_RE.findall(key)]
    compact = "".join(words)
    if any(part in compact for part in _SECRET_KEY_PARTS):
        return True
    if "pin" in words or compact in _JOINED_TOKEN_KEYS:
        return True
    return len(words) >= 2 and words[-1] == "token" and words[-2] in _TOKEN_QUALIFIERS


def contains_secret(text: str) -> bool:
    """True when ``text`` holds a secret-shaped span that ``redact`` would hide."""
    return any(pattern.search(text) for pattern, _ in _SPAN_PATTERNS)


def redact_text(text: str) -> str:
    """Replace every secret-shaped span of ``text`` by ``<redacted>``.

    Replacements are repeated to a fixpoint (one replacement can expose
    another, e.g. ``Authorization: Bearer …``); if none is reached the whole
    string is hidden, which keeps the function idempotent by construction.
    """
    lowered = text.lower()
    if not any(trigger in lowered for trigger in _TRIGGERS):
        return text
    current = text
    for _ in range(_MAX_ROUNDS):
        updated = current
        for pattern, keep_prefix in _SPAN_PATTERNS:
            replacement = (r"\1" + REDACTED) if keep_prefix else REDACTED
            updated = pattern.sub(replacement, updated)
        if updated == current:
            break
        current = updated
    # A match whose replacement changes nothing, or no fixpoint: hide it all.
    return current if not contains_secret(current) else REDACTED


def redact(value: Any) -> Redaction:
    """Redact a normalized JSON-model value (see ``palyra.core.canonical``)."""
    paths: list[str] = []
    result = _walk(value, "$", paths, 0)
    return Redaction(result, tuple(paths))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT_RE.match(key) else f"{path}[{json.dumps(key)}]"


def _walk(value: Any, path: str, paths: list[str], json_depth: int) -> Any:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = _child(path, key)
            if is_secret_key(key) and _hideable(item):
                out[key] = REDACTED
                paths.append(sub)
            else:
                out[key] = _walk(item, sub, paths, json_depth)
        return out
    if isinstance(value, list):
        out_list = []
        for i, item in enumerate(value):
            prev = value[i - 1] if i else None
            if (isinstance(prev, str) and _SECRET_FLAG.fullmatch(prev.strip())
                    and _hideable(item)):
                out_list.append(REDACTED)
                paths.append(f"{path}[{i}]")
            else:
                out_list.append(_walk(item, f"{path}[{i}]", paths, json_depth))
        return out_list
    if isinstance(value, str):
        return _walk_string(value, path, paths, json_depth)
    return value


def _hideable(item: Any) -> bool:
    # None, booleans and empty strings reveal nothing; an already redacted
    # value is left alone so that a second pass reports no paths.
    return not (item is None or isinstance(item, bool) or item in ("", REDACTED))


def _walk_string(text: str, path: str, paths: list[str], json_depth: int) -> str:
    current = text
    stripped = text.lstrip()
    if json_depth < _MAX_JSON_DEPTH and stripped[:1] in ("{", "["):
        try:
            parsed = msgspec.json.decode(text)
        except msgspec.DecodeError:
            parsed = None
        if isinstance(parsed, dict | list):
            inner: list[str] = []
            result = _walk(parsed, path + "#json", inner, json_depth + 1)
            if inner:
                paths.extend(inner)
                current = msgspec.json.encode(result).decode("utf-8")
    # The raw text is scanned too: a secret can hide where the JSON walk does
    # not look (object keys, or text the parser rejected).
    redacted = redact_text(current)
    if redacted != current:
        paths.append(path)
    return redacted
