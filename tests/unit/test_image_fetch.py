"""The fetcher against a real HTTP server on 127.0.0.1: every limit and every refusal."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import socket
from urllib.parse import quote

import pytest

from embed_server import image_fetch
from embed_server.errors import BadRequest
from embed_server.image_fetch import ImageFetcher
from embed_server.image_hosts import is_public_address


def fetcher(**overrides) -> ImageFetcher:
    options = dict(
        allow_private=True,
        connect_timeout_s=2,
        read_timeout_s=1,
        total_timeout_s=10,
        max_bytes=2_000_000,
        max_redirects=2,
        pool_size=64,
        fetches_per_request=8,
    )
    options.update(overrides)
    return ImageFetcher(**options)


def fetch(source: str, **overrides) -> bytes:
    async def run() -> bytes:
        instance = fetcher(**overrides)
        try:
            return await instance.fetch(7, source)
        finally:
            await instance.close()

    return asyncio.run(run())


def test_fetches_an_image_over_http(image_server):
    data, _ = image_server.images["square.png"]
    assert fetch(f"{image_server.url}/img/square.png") == data


def test_follows_a_redirect_within_the_limit(image_server):
    data, _ = image_server.images["gray.png"]
    assert fetch(f"{image_server.url}/redirect/img/gray.png") == data


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/slow", "timed out"),
        ("/big", "larger than the limit"),
        ("/big-chunked", "larger than the limit"),
        ("/loop", "more than 2 redirects"),
        ("/html", "content type 'text/html' is not an image"),
        ("/missing", "HTTP 404"),
    ],
)
def test_each_limit_is_a_clear_error_naming_the_item(image_server, path, reason):
    with pytest.raises(BadRequest, match=rf"image\.7: .*{reason}"):
        fetch(image_server.url + path)


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/a.png", "file:///etc/passwd", "gopher://x/", "http:///nohost"],
)
def test_only_http_and_https(url):
    with pytest.raises(BadRequest, match=r"image\.7: "):
        fetch(url)


@pytest.mark.parametrize(
    "host",
    [
        "127.0.0.1",
        "10.0.0.8",
        "172.16.3.4",
        "192.168.1.1",
        "169.254.169.254",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "[::1]",
        "[fe80::1]",
        "[::ffff:127.0.0.1]",
        "100.64.0.1",
    ],
)
def test_non_public_addresses_are_refused_without_the_setting(host):
    with pytest.raises(BadRequest, match=r"image\.7: refused"):
        fetch(f"http://{host}:9/x.png", allow_private=False)


def test_host_names_resolving_to_loopback_are_refused(image_server):
    with pytest.raises(BadRequest, match=r"image\.7: refused: localhost resolves"):
        fetch(f"http://localhost:{image_server.port}/img/square.png", allow_private=False)


def test_a_redirect_to_a_non_public_address_is_refused(image_server):
    # Treat the test server's own address as public, so only the redirect's target is barred.
    def only_first_loopback(ip) -> bool:
        return str(ip) == "127.0.0.1"

    with pytest.raises(BadRequest, match=r"image\.7: refused: 127\.0\.0\.2"):
        fetch(
            f"{image_server.url}/to-other-host",
            allow_private=False,
            address_allowed=only_first_loopback,
        )


def test_public_addresses_pass_the_policy():
    assert is_public_address(ipaddress.ip_address("8.8.8.8"))
    assert not is_public_address(ipaddress.ip_address("::ffff:10.0.0.1"))


def test_data_uris():
    payload = base64.b64encode(b"\x89PNG fake").decode()
    assert fetch(f"data:image/png;base64,{payload}") == b"\x89PNG fake"
    for bad in ("data:text/plain;base64,aGk=", "data:image/png,raw", "data:image/png;base64,@@"):
        with pytest.raises(BadRequest, match=r"image\.7: "):
            fetch(bad)
    with pytest.raises(BadRequest, match="larger than the limit"):
        fetch("data:image/png;base64," + "A" * 4_000_000)


# Host forms that mean 127.0.0.1 (or 169.254.169.254) to inet_aton, a browser or IDNA.
NUMERIC_HOSTS = [
    "2852039166",  # 169.254.169.254, the cloud metadata address
    "127.1",
    "0177.0.0.1",
    "0x7f.1",
    "0x7f000001",
    "0x7f.0.0.1",
    "127.0.0.1.",
    "\uff11\uff12\uff17.\uff10.\uff10.\uff11",  # full-width digits: 127.0.0.1 after IDNA
]


@pytest.mark.parametrize("host", NUMERIC_HOSTS)
def test_numeric_host_forms_are_checked_as_the_address_they_mean(image_server, host):
    """Before, some of these were refused only because aiohttp's URL check happened to
    reject them, and the full-width form reached 127.0.0.1 unchecked."""
    with pytest.raises(BadRequest, match=r"image\.7: refused: .* is a non-public address"):
        fetch(f"http://{host}:{image_server.port}/img/square.png", allow_private=False)


@pytest.mark.parametrize("host", ["127.1", "0x7f.0.1", "2130706433", "127.0.0.1."])
def test_numeric_host_forms_are_fetched_from_the_address_they_mean(image_server, host):
    data, _ = image_server.images["square.png"]
    assert fetch(f"http://{host}:{image_server.port}/img/square.png") == data


@pytest.mark.parametrize(
    "url",
    [
        "http://[::1",
        "http://[x]/a.png",
        "http://host:99999/a.png",
        "http://1.2.3.4.5/a.png",
        "http://256.0.0.1/a.png",
        "http://08.0.0.1/a.png",
        "http://exa mple.com/a.png",
        "http://%31%32%37.0.0.1/a.png",
        "http://xn--/a.png",
        "http://a..b/a.png",
    ],
)
def test_malformed_urls_are_a_400_naming_the_item(url):
    with pytest.raises(BadRequest, match=r"image\.7: .*(malformed|not a valid)"):
        fetch(url)


@pytest.mark.parametrize(
    "location", ["http://[x", "http://[::1", "http://h:port/", "http://1.2.3.4.5/"]
)
def test_a_redirect_to_a_malformed_url_is_a_400(image_server, location):
    with pytest.raises(BadRequest, match=r"image\.7: .*(not a valid|malformed)"):
        fetch(f"{image_server.url}/location?to={quote(location)}")


def test_a_redirect_to_a_numeric_host_form_is_checked_as_its_address(image_server):
    def only_first_loopback(ip) -> bool:
        return str(ip) == "127.0.0.1"

    target = f"http://0x7f.0.0.2:{image_server.port}/img/square.png"
    with pytest.raises(BadRequest, match=r"image\.7: refused: 0x7f\.0\.0\.2 \(127\.0\.0\.2\)"):
        fetch(
            f"{image_server.url}/location?to={quote(target)}",
            allow_private=False,
            address_allowed=only_first_loopback,
        )


# IPv6 addresses that deliver to a private IPv4 address.
EMBEDDING_PRIVATE_IPV4 = [
    "2002:7f00:1::",  # 6to4 of 127.0.0.1
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "2002:a00:1::",  # 6to4 of 10.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
    "64:ff9b:1::808:808",  # local-use NAT64: never public
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
    "2001:0:a00:1:8000:63bf:f7f7:f7f7",  # Teredo, server 10.0.0.1
    "::127.0.0.1",  # IPv4-compatible
    "::ffff:192.168.0.1",  # IPv4-mapped
]
EMBEDDING_PUBLIC_IPV4 = ["2002:808:808::1", "64:ff9b::808:808", "::ffff:8.8.8.8"]


@pytest.mark.parametrize("address", EMBEDDING_PRIVATE_IPV4)
def test_ipv6_literals_embedding_a_private_ipv4_are_refused(address):
    assert not is_public_address(ipaddress.ip_address(address))
    with pytest.raises(BadRequest, match=r"image\.7: refused: .* is a non-public address"):
        fetch(f"http://[{address}]:9/x.png", allow_private=False)


@pytest.mark.parametrize("address", EMBEDDING_PUBLIC_IPV4)
def test_ipv6_addresses_are_judged_by_the_ipv4_they_embed(address):
    assert is_public_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["2002:7f00:1::", "64:ff9b::a00:1", "::ffff:127.0.0.1"])
def test_resolver_answers_embedding_a_private_ipv4_are_refused(monkeypatch, address):
    class Resolver:
        """A DNS server that answers every name with ``address``."""

        async def resolve(self, host: str, port: int = 0, family: int = 0) -> list[dict]:
            return [
                {
                    "hostname": host,
                    "host": address,
                    "port": port,
                    "family": socket.AF_INET6,
                    "proto": 0,
                    "flags": 0,
                }
            ]

        async def close(self) -> None:
            pass

    monkeypatch.setattr(image_fetch, "DefaultResolver", Resolver)
    with pytest.raises(BadRequest, match=r"image\.7: refused: images\.example resolves"):
        fetch("http://images.example:9/x.png", allow_private=False)
