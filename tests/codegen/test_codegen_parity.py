"""Generated tables agree with the hand-written code and with themselves."""

from __future__ import annotations

from collections import Counter

from palyra_gen import errors, http_routes
from palyra_gen.palyra import v1

from palyra.core.errors import ErrorCode, PalyraError


def test_core_error_codes_equal_proto_error_codes() -> None:
    proto_names = {m.name for m in v1.ErrorCode} - {"UNSPECIFIED"}
    assert {c.value for c in ErrorCode} == proto_names
    assert set(errors.ERROR_MAPPING) == proto_names


def test_retryable_flags_agree_with_core() -> None:
    for code in ErrorCode:
        assert (
            PalyraError("x", code=code).retryable == errors.ERROR_MAPPING[code.value].retryable
        ), code


def test_grpc_status_numbers_are_known() -> None:
    for name, mapping in errors.ERROR_MAPPING.items():
        assert mapping.grpc_status in errors.GRPC_STATUS_NAMES, name
        assert 400 <= mapping.http_status <= 599, name


def test_every_route_has_unique_method_and_path() -> None:
    keys = Counter((r.http_method, r.path) for r in http_routes.ROUTES)
    assert [k for k, n in keys.items() if n > 1] == []


def test_routes_are_sorted() -> None:
    keys = [(r.path, r.http_method) for r in http_routes.ROUTES]
    assert keys == sorted(keys)


def test_every_stub_method_has_a_route_and_vice_versa() -> None:
    services = {
        name.removesuffix("Base"): getattr(v1, name)
        for name in v1.__all__
        if name.endswith("ServiceBase")
    }
    routed = {(r.service.rsplit(".", 1)[-1], r.python_method) for r in http_routes.ROUTES}
    for service, base in services.items():
        methods = {m for m in vars(base) if not m.startswith("_") and callable(getattr(base, m))}
        for method in methods:
            assert (service, method) in routed, f"{service}.{method} has no HTTP route"
    for service, method in routed:
        assert hasattr(services[service], method), f"route for unknown {service}.{method}"
