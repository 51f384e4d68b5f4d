"""Which hosts an image URL may reach: the host as the connection will see it, and the policy.

The checks must see what the connector will connect to, not what a URL parser of our own
thinks the URL says. So URLs are parsed by yarl (aiohttp's parser, which also applies IDNA:
full-width digits become ASCII ones there), and every host form that means an IPv4 address
to ``inet_aton`` or a browser (``2852039166``, ``127.1``, ``0177.0.0.1``, ``0x7f.1``, a
trailing dot) is turned into that address here and checked as a literal, before any
connection. Without this the protection would depend on whichever aiohttp release happens
to refuse those forms.

IPv6 addresses that carry an IPv4 address (IPv4-mapped and -compatible, 6to4, Teredo,
NAT64) reach that IPv4 host, so the embedded address is what the policy checks.
"""

from __future__ import annotations

import ipaddress
import re

from yarl import URL

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# RFC 8215's local-use NAT64 prefix is not globally reachable, and where its IPv4 address
# sits depends on the prefix length the operator chose inside it: refused outright.
_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_NUMBER = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_LABEL = re.compile(r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")


class InvalidHost(ValueError):
    """The URL cannot be parsed, or its host is neither an address nor a valid name."""


def _plain_public(ip: IpAddress) -> bool:
    return ip.is_global and not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
    )


def embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address delivers to (Teredo names a server and a client)."""
    if ip.ipv4_mapped is not None:
        return [ip.ipv4_mapped]
    if ip.sixtofour is not None:
        return [ip.sixtofour]
    if ip.teredo is not None:
        return list(ip.teredo)
    if ip in _NAT64 or ip in _IPV4_COMPATIBLE:
        return [ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)]
    return []


def is_public_address(ip: IpAddress) -> bool:
    """True for addresses on the public internet, judging IPv6 by any IPv4 it embeds."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _LOCAL_NAT64:
            return False
        embedded = embedded_ipv4(ip)
        if embedded:
            return all(_plain_public(v4) for v4 in embedded)
    return _plain_public(ip)


def ipv4_number_form(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host of numbers means (WHATWG URL's IPv4 parser, as inet_aton).

    One to four dot-separated parts, each decimal, octal (leading 0) or hex (0x); the last
    part fills the remaining bytes. None when the last part is not a number (a name);
    :class:`InvalidHost` when it is but the whole is not an address (``1.2.3.4.5``,
    ``256.1.1.1``, ``08.1``): a resolver must never be asked about those.
    """
    parts = host.split(".")
    if not _NUMBER.fullmatch(parts[-1]):
        return None
    if len(parts) > 4 or not all(_NUMBER.fullmatch(p) for p in parts):
        raise InvalidHost(f"{host} is not a valid IPv4 address")
    try:
        numbers = [_number(p) for p in parts]
    except ValueError:
        raise InvalidHost(f"{host} is not a valid IPv4 address") from None
    *leading, last = numbers
    if any(n > 255 for n in leading) or last >= 256 ** (5 - len(parts)):
        raise InvalidHost(f"{host} is not a valid IPv4 address")
    value = last
    for position, number in enumerate(leading):
        value += number << (8 * (3 - position))
    return ipaddress.IPv4Address(value)


def _number(part: str) -> int:
    if part[:2].lower() == "0x":
        return int(part[2:] or "0", 16)
    if len(part) > 1 and part.startswith("0"):
        return int(part, 8)
    return int(part)


def parse_url(text: str) -> URL:
    """``text`` parsed as aiohttp will parse it; :class:`InvalidHost` when it cannot be."""
    try:
        return URL(text)
    except (ValueError, TypeError):
        raise InvalidHost("the URL is malformed") from None


def normalise_host(url: URL) -> tuple[URL, IpAddress | None]:
    """``url`` with its host in canonical form, and the address when the host is one.

    A name comes back lower-case ASCII without a trailing dot (the resolver's answers are
    checked separately); an address comes back as what the connector will connect to.
    """
    raw = url.raw_host
    if not raw:
        raise InvalidHost("the URL has no host")
    if ":" in raw:
        try:
            return url, ipaddress.IPv6Address(url.host)
        except ValueError:
            raise InvalidHost(f"{url.host} is not a valid IPv6 address") from None
    host = raw.lower().removesuffix(".")
    address = ipv4_number_form(host)
    if address is not None:
        return url.with_host(str(address)), address
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in host.split(".")):
        raise InvalidHost(f"{raw!r} is not a valid host name")
    return (url if host == raw else url.with_host(host)), None
