"""The fetcher against a real HTTP server on 127.0.0.1: every limit and every refusal."""

from __future__ import annotations

import asyncio
import base64
import ipaddress

import pytest

from embed_server.errors import BadRequest
from embed_server.image_fetch import ImageFetcher, is_public_address


def fetcher(**overrides) -> ImageFetcher:
    options = dict(
        allow_private=True,
        connect_timeout_s=2,
        read_timeout_s=1,
        total_timeout_s=10,
        max_bytes=2_000_000,
        max_redirects=2,
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
