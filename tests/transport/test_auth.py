"""The shared authenticator: tokens, identity headers, connector restrictions."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from palyra.core.errors import PermissionDenied, Unauthenticated
from palyra.daemon.tokens import load_or_create_admin_token, read_admin_token
from palyra.transport.auth import Authenticator, parse_connector_tokens

DEVICE = "01J00000000000000000000000"


def _headers(token: str | None = "admin", principal: str = "user:a", **extra: str) -> dict[str, str]:
    headers = {"x-palyra-principal": principal, "x-palyra-device-id": DEVICE, **extra}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return headers


@pytest.fixture
def auth() -> Authenticator:
    return Authenticator(admin_token="admin",
                         connector_tokens=parse_connector_tokens(["any", "discord=disc"]))


def test_public_rpc_needs_no_token(auth: Authenticator) -> None:
    assert auth.authenticate("GetHealth", {}) is None
    # ...but a wrong token on it is still refused rather than ignored.
    with pytest.raises(Unauthenticated):
        auth.authenticate("GetHealth", {"authorization": "Bearer nope"})


def test_admin_token_yields_the_caller(auth: Authenticator) -> None:
    caller = auth.authenticate("CreateRun", _headers(**{"x-palyra-channel": "cli",
                                                        "x-request-id": "r1"}))
    assert caller is not None
    assert (caller.principal, caller.device_id, caller.channel) == ("user:a", DEVICE, "cli")
    assert (caller.token_kind, caller.request_id) == ("admin", "r1")


TOKEN_WHERE = ["<data-dir>/admin.token", "$PALYRA_ADMIN_TOKEN", "authorization: Bearer <token>"]
HEADERS_NEEDED = ["x-palyra-principal", "x-palyra-device-id", "authorization: Bearer <token>"]


@pytest.mark.parametrize(
    ("headers", "starts", "hints"),
    [
        (_headers(token=None), "missing credentials", TOKEN_WHERE),
        (_headers(token="wrong"), "invalid token", TOKEN_WHERE[:2]),
        ({**_headers(), "authorization": "Basic admin"}, "malformed authorization header", TOKEN_WHERE),
        ({**_headers(), "authorization": "Bearer "}, "malformed authorization header", TOKEN_WHERE),
        (_headers(principal=""), "the x-palyra-principal header is required", HEADERS_NEEDED),
        ({k: v for k, v in _headers().items() if k != "x-palyra-device-id"},
         "the x-palyra-device-id header is required", HEADERS_NEEDED),
        ({**_headers(), "x-palyra-device-id": "not-a-ulid"}, "x-palyra-device-id must be a ULID",
         ["01J00000000000000000000000"]),
    ],
)
def test_missing_or_bad_credentials_are_unauthenticated(
    auth: Authenticator, headers: dict[str, str], starts: str, hints: list[str]
) -> None:
    with pytest.raises(Unauthenticated) as info:
        auth.authenticate("ListSessions", headers)
    # The message says what to do: where the admin token lives, which headers.
    message = info.value.message
    assert message.startswith(starts), message
    for hint in hints:
        assert hint in message, (hint, message)
    assert "\n" not in message


def test_connector_tokens_only_route_messages_as_their_channel(auth: Authenticator) -> None:
    caller = auth.authenticate("RouteMessage", _headers("any", "channel:slack"))
    assert caller is not None and caller.token_kind == "connector"
    assert auth.authenticate("RouteMessage", _headers("disc", "channel:discord")) is not None
    for rpc, token, principal in [
        ("ListSessions", "any", "channel:slack"),  # not RouteMessage
        ("RouteMessage", "any", "user:a"),  # not a channel principal
        ("RouteMessage", "disc", "channel:slack"),  # bound to discord
    ]:
        with pytest.raises(PermissionDenied):
            auth.authenticate(rpc, _headers(token, principal))
    with pytest.raises(PermissionDenied):
        auth.authenticate("RouteMessage",
                          _headers("any", "channel:slack", **{"x-palyra-channel": "discord"}))


def test_bound_principal() -> None:
    auth = Authenticator(admin_token="admin", bound_principal="user:owner")
    assert auth.authenticate("GetRun", _headers(principal="user:owner")) is not None
    with pytest.raises(PermissionDenied):
        auth.authenticate("GetRun", _headers(principal="user:other"))


def test_a_bound_token_cannot_claim_a_channel() -> None:
    """Issue 35 item 1, the same pattern: ``x-palyra-channel`` reaches Cedar's context, so
    a per-principal token may not name one (the admin token, trusted, still may)."""
    auth = Authenticator(admin_token="admin",
                         principal_tokens=lambda t: "user:mallory" if t == "plt_x" else None)
    assert auth.authenticate("CreateRun", _headers("plt_x", "")) is not None
    with pytest.raises(PermissionDenied):
        auth.authenticate("CreateRun", _headers("plt_x", "", **{"x-palyra-channel": "slack:T1"}))
    caller = auth.authenticate("CreateRun", _headers(**{"x-palyra-channel": "slack:T1"}))
    assert caller is not None and caller.channel == "slack:T1"


def test_admin_token_file_is_created_once_with_0600(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    token, created = load_or_create_admin_token(data_dir)
    assert created and len(token) >= 32
    assert stat.S_IMODE(os.stat(data_dir / "admin.token").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(data_dir).st_mode) == 0o700
    again, created_again = load_or_create_admin_token(data_dir)
    assert (again, created_again) == (token, False)
    assert read_admin_token(data_dir) == token
    assert read_admin_token(tmp_path / "missing") is None
