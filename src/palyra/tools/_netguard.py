"""Which network addresses a tool may reach: public ones, unless the operator allows more.

Pure. ``http.fetch`` resolves a host itself, checks *every* address it
resolves to here, and connects to the checked address (so a second DNS answer
cannot swap in another one); it does the same on every redirect. Refused by
default: loopback, private (RFC 1918, unique-local), link-local (which holds the
cloud metadata address 169.254.169.254), carrier-grade NAT, multicast,
unspecified and reserved ranges — anything ``ipaddress`` does not call global —
and IPv4-mapped IPv6 forms of those. An operator may allow networks (CIDR) in
``ToolsConfig.fetch_allow``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services that sit on otherwise global addresses (Alibaba Cloud's is
# in the shared range and refused anyway; named here so the intent is explicit).
_METADATA = frozenset({ipaddress.ip_address("100.100.100.200"),
                       ipaddress.ip_address("fd00:ec2::254")})


def parse_networks(specs: Iterable[str]) -> tuple[Network, ...]:
    """CIDR strings (``10.0.0.0/8``, ``127.0.0.1/32``, ``::1/128``) as networks.

    Raises:
        ValueError: a spec is not a network.
    """
    return tuple(ipaddress.ip_network(spec.strip(), strict=False) for spec in specs)


def refusal(address: str, allow: tuple[Network, ...] = ()) -> str:
    """Why ``address`` may not be reached ("" when it may)."""
    ip: Address = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in allow):
        return ""
    if ip in _METADATA:
        return f"{ip} is a cloud metadata address"
    if ip.is_loopback:
        return f"{ip} is a loopback address"
    if ip.is_link_local:
        return f"{ip} is link-local (cloud metadata lives there)"
    if ip.is_multicast:
        return f"{ip} is a multicast address"
    if ip.is_unspecified:
        return f"{ip} is the unspecified address"
    if ip.is_private:
        return f"{ip} is a private address"
    if not ip.is_global:
        return f"{ip} is not a public address"
    return ""
