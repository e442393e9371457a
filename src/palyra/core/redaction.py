"""Redaction of secrets in event payloads before they are persisted. Pure.

The rule is *hide secrets, not content*:

* A value under a **secret key** (``password``, ``api_key``, ``authorization``,
  ``access_token``, ``client_secret``, …) is replaced by ``"<redacted>"``. A
  bare ``token`` key, ``max_tokens`` or ``prompt_tokens`` are content (model
  output, usage counters) and are kept.
* Inside any string, **secret-shaped spans** (``Bearer …``, ``sk-…``,
  ``token=…``, ``api_key=…``, ``--password …`` flag pairs, ``Authorization:``/``Cookie:`` header values, PEM
  private keys, AWS ``AKIA…`` ids, GitHub/Slack tokens, JWTs) are replaced by
  ``"<redacted>"`` while the surrounding text stays.
* In a list (an argv), the item after a secret flag (``"--password"``,
  ``"--api-key"``, ``"-token"`` …) is replaced by ``"<redacted>"``.
* Strings holding a JSON object or array are parsed and redacted recursively
  (path marker ``#json``); they are re-serialised only when something changed.

``redact`` returns the JSON paths that were changed, in document order; the
paths are stored with the event and covered by its hash. ``redact`` is
idempotent: its output contains nothing it would redact again.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any

import msgspec

from palyra.core.canonical import normalize

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
    if not _triggered(lowered):
        return text
    if _no_span(text, lowered):
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


def _triggered(lowered: str) -> bool:
    # Every span pattern needs one of these (lowercased) substrings; text with
    # none of them is returned untouched without running the patterns ("sk-"
    # needs "-"). Written out, not a loop over a tuple: the generator was most
    # of the cost of a short string.
    return (
        "=" in lowered or "-" in lowered or "gh" in lowered or "bearer" in lowered
        or "cookie" in lowered or "authorization" in lowered or "private key" in lowered
        or "akia" in lowered or "asia" in lowered or "github_pat_" in lowered
        or "xox" in lowered or "eyj" in lowered
    )  # fmt: skip


# Characters outside ASCII that Python's case-insensitive matching equates
# with an ASCII letter although ``str.lower`` does not map them to it (found by
# trying every code point against ``(?i)[a-z]``): with one of them in the text a
# pattern could match without its literal showing in the lowered text.
_FOLD_CHARS = ("\u0130", "\u0131", "\u017f", "\u212a")


def _no_span(text: str, lowered: str) -> bool:
    """True when no span pattern matches ``text`` (so ``redact_text`` returns it as is).

    Each pattern is searched only when a literal every match of it contains
    shows in ``lowered``; a regex search costs 0.5-2 µs even on a short
    string, a substring test tens of nanoseconds. Exact: a match's characters
    lower-case to the literal unless one of ``_FOLD_CHARS`` is present, and
    then every pattern is searched.
    """
    if not text.isascii() and any(c in text for c in _FOLD_CHARS):
        return not contains_secret(text)
    pem, header, bearer, assign, flag, sk, aws, github, slack, jwt = _SPAN_REGEXES
    if "private key-----" in lowered and pem.search(text):
        return False
    if (
        ":" in lowered
        and ("authorization" in lowered or "cookie" in lowered)
        and header.search(text)
    ):
        return False
    if "bearer" in lowered and bearer.search(text):
        return False
    if "=" in lowered and _ASSIGN_LITERALS.search(lowered) and assign.search(text):
        return False
    if "-" in lowered and _FLAG_LITERALS.search(lowered) and flag.search(text):
        return False
    if "sk-" in lowered and sk.search(text):
        return False
    if ("akia" in lowered or "asia" in lowered) and aws.search(text):
        return False
    if ("gh" in lowered or "github_pat_" in lowered) and github.search(text):
        return False
    if "xox" in lowered and slack.search(text):
        return False
    return not ("eyj" in lowered and jwt.search(text))


_SPAN_REGEXES = tuple(pattern for pattern, _ in _SPAN_PATTERNS)
# Every match of the ``name=value`` pattern ends its prefix in one of these.
_ASSIGN_LITERALS = re.compile(r"(?:token|secret|key|password|passwd|pwd)=")
# Every match of the ``--name value`` pattern starts with one of these.
_FLAG_LITERALS = re.compile(r"-(?:token|secret|api|key|password|passwd|pwd|access|client)")


def redact(value: Any) -> Redaction:
    """Redact a normalized JSON-model value (see ``palyra.core.canonical``).

    Nothing is copied that is not changed: unchanged dicts, lists and strings
    of the result are the input's own objects (the input is never mutated).
    """
    paths: list[str] = []
    result = _walk(value, None, paths, 0)
    return Redaction(result, tuple(paths))


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT_RE.match(key) else f"{path}[{json.dumps(key)}]"


# A path is built only when something under it is redacted: the walk passes a
# chain ``(parent, step)`` (``None`` is ``$``), step a dict key, a list index or
# ``_JSON_STEP`` for the inside of a JSON string.
_Path = tuple[Any, Any] | None
_JSON_STEP = object()


def _path(node: _Path) -> str:
    if node is None:
        return "$"
    parent, step = node
    base = _path(parent)
    if step is _JSON_STEP:
        return base + "#json"
    if step.__class__ is int:
        return f"{base}[{step}]"
    return _child(base, step)


# Key -> "a non-empty value under it is hidden"; payload keys repeat, so the
# classification is looked up in a plain dict (bounded) before ``is_secret_key``.
_KEY_CACHE: dict[str, bool] = {}
_KEY_CACHE_MAX = 4096


# The ASCII keys of _KEY_CACHE that are not secret, as a set: the screens ask ``key in``
# it (an operator, no method call) for every key of every payload they walk.
_PLAIN_KEYS: set[str] = set()


def _secret(key: str) -> bool:
    secret = _KEY_CACHE.get(key)
    if secret is None:
        secret = is_secret_key(key)
        if len(_KEY_CACHE) < _KEY_CACHE_MAX and key.__class__ is str:
            _KEY_CACHE[key] = secret
            if not secret and key.isascii():  # ASCII: the one-walk screen's UTF-8 check
                _PLAIN_KEYS.add(key)              # has nothing to find in a key it skips
    return secret


def _walk(value: Any, path: _Path, paths: list[str], json_depth: int) -> Any:
    if isinstance(value, dict):
        return _walk_dict(value, path, paths, json_depth)
    if isinstance(value, list):
        return _walk_list(value, path, paths, json_depth)
    if isinstance(value, str):
        return _walk_string(value, path, paths, json_depth)
    return value


def _walk_dict(value: dict[str, Any], path: _Path, paths: list[str], json_depth: int) -> Any:
    out: dict[str, Any] | None = None
    key_cache = _KEY_CACHE
    for key, item in value.items():
        secret = key_cache.get(key)
        if secret is None:
            secret = _secret(key)
        if secret and _hideable(item):
            new: Any = REDACTED
            paths.append(_path((path, key)))
        elif item.__class__ is str:
            # _walk_string's outcome for the usual string, without the calls: no
            # JSON to parse (not "{", "[" or a space first) and no span trigger
            # (redact_text's own first test) leave it as it is.
            first = item[:1]
            if (
                first != "{" and first != "[" and not first.isspace()
                and not _triggered(item.lower())
            ):  # fmt: skip
                continue
            new = _walk_string(item, (path, key), paths, json_depth)
        elif isinstance(item, str):
            new = _walk_string(item, (path, key), paths, json_depth)
        elif isinstance(item, dict):
            new = _walk_dict(item, (path, key), paths, json_depth)
        elif isinstance(item, list):
            new = _walk_list(item, (path, key), paths, json_depth)
        else:
            continue
        if new is not item:
            if out is None:
                out = dict(value)
            out[key] = new
    if out is None:
        return value
    return out


def _walk_list(value: list[Any], path: _Path, paths: list[str], json_depth: int) -> Any:
    out: list[Any] | None = None
    for i, item in enumerate(value):
        if i and _after_secret_flag(value[i - 1]) and _hideable(item):
            # argv: ``["--password", "hunter2"]`` hides the flag's value.
            if out is None:
                out = list(value)
            out[i] = REDACTED
            paths.append(_path((path, i)))
            continue
        if isinstance(item, str | dict | list):
            new = _walk(item, (path, i), paths, json_depth)
            if new is not item:
                if out is None:
                    out = list(value)
                out[i] = new
    if out is None:
        return value
    return out


def _after_secret_flag(item: Any) -> bool:
    return isinstance(item, str) and _SECRET_FLAG.fullmatch(item.strip()) is not None


def _hideable(item: Any) -> bool:
    # None, booleans and empty strings reveal nothing; an already redacted
    # value is left alone so that a second pass reports no paths.
    return not (item is None or isinstance(item, bool) or item in ("", REDACTED))


def _walk_string(text: str, path: _Path, paths: list[str], json_depth: int) -> str:
    current = text
    first = text[:1]
    if (
        json_depth < _MAX_JSON_DEPTH
        and (first == "{" or first == "[" or (first.isspace() and text.lstrip()[:1] in ("{", "[")))
    ):  # fmt: skip
        try:
            parsed = msgspec.json.decode(text)
        except msgspec.DecodeError:
            parsed = None
        if isinstance(parsed, dict | list):
            inner: list[str] = []
            result = _walk(parsed, (path, _JSON_STEP), inner, json_depth + 1)
            if inner:
                paths.extend(inner)
                current = msgspec.json.encode(result).decode("utf-8")
    # The raw text is scanned too: a secret can hide where the JSON walk does
    # not look (object keys, or text the parser rejected).
    redacted = redact_text(current)
    if redacted != current:
        paths.append(_path(path))
    return redacted


# --- normalize and redact in one walk -------------------------------------


class _Unscreened(Exception):
    """The one-walk path met something it leaves to ``normalize`` then ``redact``."""


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAX_DEPTH = 64  # palyra.core.canonical.MAX_DEPTH (a test holds them equal)


def normalize_screened(payload: Any) -> tuple[Any, bool]:
    """``normalize(payload)``, and whether ``redact`` of it certainly changes nothing.

    Returns ``(plain, clean)``: ``plain`` is exactly ``normalize(payload)``;
    ``clean`` True means ``redact(plain)`` would return ``plain`` itself with no
    paths (no secret key, no string that starts like JSON or holds one of
    ``redact_text``'s trigger literals), so the caller may skip it. One walk
    instead of two for the usual payload; anything the walk does not settle
    (a secret-looking key or string, a value outside plain JSON types, deep
    nesting, an error) gives ``clean`` False, and ``normalize`` makes
    ``plain``, so values and errors are exactly those of ``normalize``.

    Raises:
        InvalidArgument: as ``normalize``.
    """
    if payload.__class__ is dict:
        try:
            return _screen_dict(payload, 1), True
        except (_Unscreened, UnicodeEncodeError):
            pass
    return normalize(payload), False


def _screen_string(text: str) -> str:
    if text in _SETTLED_TEXT:  # found clean before (see _SETTLED_TEXT)
        return text
    if len(text) == _ULID_LEN and _ulid_shaped(text):  # clean by its shape (see _ulid_shaped)
        _settle_id(text)
        return text
    if not text.isascii():
        text.encode("utf-8")  # a lone surrogate raises: normalize reports it
    first = text[:1]
    if first == "{" or first == "[":
        _screen_json(text)  # tool arguments and output: JSON held in a string
    elif first.isspace():
        raise _Unscreened
    lowered = text.lower()
    if (
        "=" in lowered or "-" in lowered or "gh" in lowered or "bearer" in lowered
        or "cookie" in lowered or "authorization" in lowered or "private key" in lowered
        or "akia" in lowered or "asia" in lowered or "github_pat_" in lowered
        or "xox" in lowered or "eyj" in lowered
    ) and not _no_span(text, lowered):  # redact_text's own two tests, the first inline
        raise _Unscreened
    _settle(text, first)
    return text


def _screen_flags(items: list[Any]) -> None:
    # argv: the item after ``--password`` is hidden by _walk_list, whatever it holds.
    for item in items:
        if item.__class__ is str and "-" in item and _after_secret_flag(item):
            raise _Unscreened


def _screen_json(text: str) -> None:
    # What _walk_string does with JSON text, as a check: the parsed value must
    # hold no secret key and no string redact would change (nested JSON text
    # is left to redact). Text that does not parse is plain text to redact too.
    try:
        parsed = msgspec.json.decode(text)
    except msgspec.DecodeError:
        return
    _screen_plain(parsed, nested=True)


def is_clean(plain: Any) -> bool:
    """True when ``redact(plain)`` certainly returns ``plain`` itself with no paths.

    For a value already in the JSON model (``normalize``'s output, or the proto3
    JSON of an engine message): the same checks as the one-walk screen, without
    building a copy. False means "not settled", never "holds a secret".
    """
    try:
        _screen_plain(plain, nested=False)
    except _Unscreened:
        return False
    return True


def _screen_plain(root: Any, *, nested: bool) -> None:
    # Raises _Unscreened unless redact leaves ``root`` as it is. ``nested``: inside
    # JSON text, where further JSON text is left to redact (not settled here).
    stack = [root]
    plain_keys = _PLAIN_KEYS
    settled = _SETTLED_TEXT
    while stack:
        item = stack.pop()
        kind = item.__class__
        if kind is dict:
            for key, value in item.items():
                if key.__class__ is not str:
                    raise _Unscreened
                if key not in plain_keys and _secret(key):
                    raise _Unscreened
                kind = value.__class__
                # Strings are screened here, not pushed: most values are (numbers,
                # booleans and other leaves need nothing at all).
                if kind is str:
                    if value not in settled:
                        _screen_text(value, nested)
                elif kind is dict or kind is list:
                    stack.append(value)
        elif kind is list:
            _screen_flags(item)
            stack.extend(item)
        elif kind is str and item not in settled:
            _screen_text(item, nested)


# Text already screened and found clean. Whether redact changes a string (outside JSON
# text) depends on the string alone, and payloads repeat most of theirs: an engine step
# has its proposal id in four events, the tool name, enum names, the policy's reason,
# ids and hash, the provider and model; a task's events its id, kind, state and owner.
# Each is screened once; free text that varies (replies, tool arguments and output)
# simply misses. Bounded: short strings only, forgotten all at once when full (at most
# about 200 KiB: an idle daemon keeps little).
_SETTLED_TEXT: set[str] = set()
_SETTLED_LIMIT = 1024
_SETTLED_MAX_CHARS = 128

# A canonical ULID (the ids palyra makes: events, runs, tasks, proposals, ...) is clean
# by its shape: upper-case Crockford base32 has no I, L, O or U, no lower-case letter and
# none of "-", "=", ":", "_" or white space, and every span pattern needs one of those
# (``AKIA``/``ASIA`` an I, the PEM, ``sk-`` and flag patterns a "-", the case-sensitive
# ``gh*_``, ``xox*-`` and ``eyJ`` a lower-case letter, the rest a separator), and it is
# neither JSON nor argv flag text. Such text is settled by this test and kept in
# ``_SETTLED_TEXT`` apart from the rest (``_SETTLED_IDS``): ids are mostly seen a few
# times (an engine step's proposal id in four events, a task's id in its two), so they
# are still found by one lookup, but they no longer count towards the text's bound:
# counted, the ids of about 1,000 tasks filled it and emptied it, forgetting the text
# that does repeat. Ids are forgotten among themselves, ``_SETTLED_LIMIT`` at a time.
_ULID_LEN = 26
_ulid_shaped = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}").fullmatch
_SETTLED_IDS: list[str] = []  # the ids in _SETTLED_TEXT, in the order they came


def _settle_id(text: str) -> None:
    ids = _SETTLED_IDS
    if len(ids) >= _SETTLED_LIMIT:
        _SETTLED_TEXT.difference_update(ids)
        ids.clear()
    ids.append(text)
    _SETTLED_TEXT.add(text)


def _screen_text(text: str, nested: bool) -> None:
    # One string of _screen_plain's walk (raises _Unscreened unless redact keeps it).
    if len(text) == _ULID_LEN and _ulid_shaped(text):  # clean by its shape
        _settle_id(text)
        return
    first = text[:1]
    if first == "{" or first == "[":
        if nested:
            raise _Unscreened
        _screen_json(text)
    elif first.isspace():
        raise _Unscreened
    lowered = text.lower()
    if _triggered(lowered) and not _no_span(text, lowered):
        raise _Unscreened
    _settle(text, first)


def _settle(text: str, first: str) -> None:
    # Kept: short ASCII text that is not JSON. JSON text is clean or not by where it
    # sits (inside JSON text it is left to redact); ASCII text holds no lone surrogate,
    # so a hit needs none of the normalizing walk's checks either.
    if len(text) <= _SETTLED_MAX_CHARS and first != "{" and first != "[" and text.isascii():
        settled = _SETTLED_TEXT
        if len(settled) - len(_SETTLED_IDS) >= _SETTLED_LIMIT:  # the ids have their own
            settled.clear()
            _SETTLED_IDS.clear()
        settled.add(text)


def _screen_item(item: Any, depth: int) -> Any:
    kind = item.__class__
    if kind is str:
        return _screen_string(item)
    if kind is int:
        if not _INT64_MIN <= item <= _INT64_MAX:
            raise _Unscreened
        return item
    if item is None or kind is bool:
        return item
    if kind is dict and depth < _MAX_DEPTH:
        return _screen_dict(item, depth + 1)
    if kind is list and depth < _MAX_DEPTH:
        _screen_flags(item)
        return [_screen_item(x, depth + 1) for x in item]
    if kind is float and math.isfinite(item):
        return item
    raise _Unscreened


def _screen_dict(value: dict[Any, Any], depth: int) -> dict[str, Any]:
    # ``depth`` is the depth of the dict's items (normalize's fast path, exactly).
    out: dict[str, Any] = {}
    plain_keys, settled = _PLAIN_KEYS, _SETTLED_TEXT
    for key, item in value.items():
        if key.__class__ is not str:
            raise _Unscreened
        if key not in plain_keys:
            if not key.isascii():
                key.encode("utf-8")  # before the cache: a lone surrogate must raise
            if _secret(key):
                raise _Unscreened
        kind = item.__class__
        if kind is str:  # a string settled before needs no call (most of them)
            out[key] = item if item in settled else _screen_string(item)
        elif (kind is int and _INT64_MIN <= item <= _INT64_MAX) or kind is bool or item is None:
            out[key] = item
        elif kind is dict and depth < _MAX_DEPTH:  # _screen_item's dict case, one call fewer
            out[key] = _screen_dict(item, depth + 1)
        else:
            out[key] = _screen_item(item, depth)
    return out
