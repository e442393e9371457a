"""IPv6 transition forms that embed an IPv4 address are judged as that IPv4 address.

Every IPv4 range the fetch filter refuses, written down here from the IANA special-purpose
registry (not from the filter), crossed with every embedding, built here from its RFC:
an embedded refused address is refused, an embedded public one is not.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palyra.tools._netguard import parse_networks, refusal

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address

# RFC 6890 and successors: none of these may be fetched.
REFUSED_V4 = ("0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
              "172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16",
              "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4",
              "240.0.0.0/4", "255.255.255.255/32", "100.100.100.200/32")
# The two globally reachable exceptions inside 192.0.0.0/24 (PCP and TURN anycast).
IETF_ANYCAST = (V4("192.0.0.9"), V4("192.0.0.10"))


def _v6(raw: bytes) -> str:
    return str(V6(raw))


def _mapped(v4: V4, free: bytes) -> str:  # RFC 4291 §2.5.5.2
    return _v6(bytes(10) + b"\xff\xff" + v4.packed)


def _translated(v4: V4, free: bytes) -> str:  # RFC 2765 (SIIT) ::ffff:0:a.b.c.d
    return _v6(bytes(8) + b"\xff\xff\x00\x00" + v4.packed)


def _compatible(v4: V4, free: bytes) -> str:  # RFC 4291 §2.5.5.1
    return _v6(bytes(12) + v4.packed)


def _nat64(v4: V4, free: bytes) -> str:  # RFC 6052 well-known prefix 64:ff9b::/96
    return _v6(b"\x00\x64\xff\x9b" + bytes(8) + v4.packed)


def _six_to_four(v4: V4, free: bytes) -> str:  # RFC 3056: 2002:V4ADDR::/48 + any site bits
    return _v6(b"\x20\x02" + v4.packed + free[:10])


_LOCAL = b"\x00\x64\xff\x9b\x00\x01"  # RFC 8215 local-use 64:ff9b:1::/48


def _local48(v4: V4, free: bytes) -> str:
    a = v4.packed
    return _v6(_LOCAL + a[:2] + b"\x00" + a[2:] + bytes(5))


def _local56(v4: V4, free: bytes) -> str:
    a = v4.packed
    return _v6(_LOCAL + free[:1] + a[:1] + b"\x00" + a[1:] + bytes(4))


def _local64(v4: V4, free: bytes) -> str:
    return _v6(_LOCAL + free[:2] + b"\x00" + v4.packed + bytes(3))


def _local96(v4: V4, free: bytes) -> str:
    return _v6(_LOCAL + free[:6] + v4.packed)


EMBEDDINGS: dict[str, Callable[[V4, bytes], str]] = {
    "mapped": _mapped, "siit": _translated, "compatible": _compatible, "nat64": _nat64,
    "6to4": _six_to_four, "nat64-local/48": _local48, "nat64-local/56": _local56,
    "nat64-local/64": _local64, "nat64-local/96": _local96}
free_bits = st.binary(min_size=10, max_size=10)


@pytest.mark.parametrize("embed", EMBEDDINGS.values(), ids=list(EMBEDDINGS))
@pytest.mark.parametrize("network", REFUSED_V4)
@given(offset=st.integers(min_value=0), free=free_bits)
def test_a_refused_ipv4_address_is_refused_in_every_embedding(
        network: str, embed: Callable[[V4, bytes], str], offset: int, free: bytes) -> None:
    net = ipaddress.IPv4Network(network)
    v4 = net[offset % net.num_addresses]
    if v4 in IETF_ANYCAST:
        return
    assert refusal(str(v4)), v4
    address = embed(v4, free)
    assert refusal(address), f"{address} embeds {v4}"


# Embeddings with one reading: a public IPv4 address inside one stays reachable.
UNAMBIGUOUS = ("mapped", "siit", "compatible", "nat64", "6to4", "nat64-local/96")


@pytest.mark.parametrize("name", UNAMBIGUOUS)
@given(v4=st.ip_addresses(v=4), free=free_bits)
def test_a_public_ipv4_address_is_reachable_in_every_embedding(
        name: str, v4: V4, free: bytes) -> None:
    if refusal(str(v4)) or any(v4 in ipaddress.IPv4Network(n) for n in REFUSED_V4):
        return
    if name == "nat64-local/96" and not any(v4.packed[1:]):
        return  # also reads as a /64 embedding of 0.0.0.x, refused: fail closed
    address = EMBEDDINGS[name](v4, free if name != "nat64-local/96" else bytes(6))
    assert refusal(address) == "", address


@pytest.mark.parametrize("name", list(EMBEDDINGS))
def test_the_cloud_metadata_address_in_every_embedding(name: str) -> None:
    address = EMBEDDINGS[name](V4("169.254.169.254"), bytes(10))
    assert "169.254.169.254" in refusal(address), address
    if name in UNAMBIGUOUS:  # an operator who allows the IPv4 network allows these too
        assert refusal(address, parse_networks(["169.254.0.0/16"])) == ""
