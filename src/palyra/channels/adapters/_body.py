"""Decoding a signed delivery's JSON body: every way it can be bad is bad input.

A signature proves who sent a body, not that it is sane. msgspec reports most bad
bodies as its own errors, but invalid UTF-8 surfaces as ``UnicodeDecodeError`` and
deep nesting (even inside a field the type ignores) as ``RecursionError``; each is the
sender's fault and must be a 4xx, never an INTERNAL.
"""

from __future__ import annotations

from typing import TypeVar

import msgspec

from palyra.core.errors import InvalidArgument

T = TypeVar("T")


def decode_body(body: bytes, type_: type[T], what: str,
                details: dict[str, str] | None = None) -> T:
    """``body`` as ``type_``.

    Raises:
        InvalidArgument: not JSON of that shape, not UTF-8, or nested too deeply.
    """
    try:
        return msgspec.json.decode(body, type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        problem = str(exc)
    except UnicodeDecodeError as exc:
        problem = f"not valid UTF-8 (byte {exc.start})"
    except RecursionError:
        problem = "nested too deeply"
    raise InvalidArgument(f"malformed {what} payload: {problem}", details=details)
