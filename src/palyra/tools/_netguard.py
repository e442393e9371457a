"""Which network addresses a tool may reach: public ones, unless the operator allows more.

Pure. ``http.fetch`` resolves a host itself, checks *every* address it
resolves to here, and connects to the checked address (so a second DNS answer
cannot swap in another one); it does the same on every redirect. Refused by
default: loopback, private (RFC 1918, unique-local), link-local (which holds the
cloud metadata address 169.254.169.254), carrier-grade NAT, multicast,
unspecified and reserved ranges — anything ``ipaddress`` does not call global.

An IPv6 address that embeds an IPv4 address reaches that IPv4 address (through a
translator, a relay or the host's own stack), so it is judged as the IPv4 address it
embeds: IPv4-mapped ``::ffff:0:0/96``, SIIT's IPv4-translated ``::ffff:0:0:0/96``,
IPv4-compatible ``::/96``, NAT64's well-known ``64:ff9b::/96``, 6to4 ``2002::/16``, and
NAT64's local-use ``64:ff9b:1::/48`` (RFC 8215), whose prefix length the network picks:
there every RFC 6052 position that is well formed is decoded, and the address is refused
if any reading is (fail closed; an operator who runs such a translator may allow it).
An operator may allow networks (CIDR) in ``ToolsConfig.fetch_allow``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import httpx

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


# IANA: 192.0.0.0/24 is not globally reachable but for two anycast services; some Python
# versions' ``ipaddress`` call most of it global, so the rule is spelt out here.
_IETF_PROTOCOL = ipaddress.ip_network("192.0.0.0/24")
_IETF_GLOBAL = frozenset({ipaddress.ip_address("192.0.0.9"), ipaddress.ip_address("192.0.0.10")})
_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
# Where RFC 6052 puts the IPv4 octets for each prefix length (byte 8 is the zero
# "u" octet), and from which byte on the suffix must be zero for the form to hold.
_RFC6052 = ((bytes((6, 7, 9, 10)), 11), (bytes((7, 9, 10, 11)), 12),
            (bytes((9, 10, 11, 12)), 13), (bytes((12, 13, 14, 15)), 16))


def embedded_ipv4(ip: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 transition form stands for (none for a plain IPv6 one)."""
    raw = ip.packed
    compatible = ip in _COMPATIBLE and int(ip) > 1  # :: and ::1 are themselves
    if compatible or any(ip in net for net in (_MAPPED, _TRANSLATED, _NAT64)):
        return (ipaddress.IPv4Address(raw[12:]),)
    if ip in _SIX_TO_FOUR:
        return (ipaddress.IPv4Address(raw[2:6]),)
    if ip in _NAT64_LOCAL:
        return tuple(ipaddress.IPv4Address(bytes(raw[i] for i in octets))
                     for octets, zero_from in _RFC6052
                     if zero_from == 16 or (raw[8] == 0 and not any(raw[zero_from:])))
    return ()


def refusal(address: str, allow: tuple[Network, ...] = ()) -> str:
    """Why ``address`` may not be reached ("" when it may)."""
    ip: Address = ipaddress.ip_address(address)
    if any(ip in network for network in allow):
        return ""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = embedded_ipv4(ip)
        for v4 in embedded:
            why = refusal(str(v4), allow)
            if why:
                return why if ip.ipv4_mapped == v4 else f"{ip} embeds {v4}: {why}"
        if embedded:
            return ""
    return _refusal(ip)


def _refusal(ip: Address) -> str:
    if ip in _METADATA:
        return f"{ip} is a cloud metadata address"
    if ip in _IETF_PROTOCOL and ip not in _IETF_GLOBAL:
        return f"{ip} is an IETF protocol assignment (192.0.0.0/24), not a public address"
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


def via_address(url: httpx.URL, address: str
                ) -> tuple[httpx.URL, dict[str, str], dict[str, object]]:
    """The request for ``url`` sent to the checked ``address`` (URL, headers,
    extensions): the Host header and the TLS server name stay ``url``'s host, so
    the connection goes where the check looked and nowhere a second DNS answer says."""
    host_header = url.host if url.port is None else f"{url.host}:{url.port}"
    extensions: dict[str, object] = {"sni_hostname": url.host} if url.scheme == "https" else {}
    return url.copy_with(host=address), {"host": host_header}, extensions
