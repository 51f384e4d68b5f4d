"""Fetch image inputs (http/https URLs and ``data:`` URIs) without letting them hurt us.

One shared aiohttp session fetches concurrently. Every limit is a 400 naming the item:
scheme, malformed URL or host, size (streamed, reading stops past the limit), redirects
(followed by hand so each hop is checked), content type, and time. Server-side request
forgery is refused before any connection: the host of every hop is normalised and checked
as an address when it is one (``image_hosts``), and the addresses a host name resolves to
are checked at the resolver, so a redirect or DNS trick cannot reach loopback, private,
link-local (cloud metadata), multicast, reserved or unspecified addresses unless
``EMBED_ALLOW_PRIVATE_URLS=true``. Each request fetches at most
``EMBED_IMAGE_FETCHES_PER_REQUEST`` URLs at once, so one request of many slow URLs cannot
hold the whole connection pool.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import ipaddress
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from embed_server.errors import BadRequest
from embed_server.image_hosts import (
    InvalidHost,
    IpAddress,
    is_public_address,
    normalise_host,
    parse_url,
)
from embed_server.observability.metrics import IMAGE_FETCH_FAILURES

_REDIRECTS = {301, 302, 303, 307, 308}


class ImageFetchFailed(BadRequest):
    """A 400 about one image input, with a short reason that labels the failure metric."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ForbiddenAddress(Exception):
    def __init__(self, host: str, address: str) -> None:
        super().__init__(f"{host} resolves to non-public address {address}")
        self.host = host
        self.address = address


class GuardedResolver(AbstractResolver):
    """Resolve with the default resolver, then refuse the answer if any address is barred."""

    def __init__(self, address_allowed: Callable[[IpAddress], bool]) -> None:
        self._inner = DefaultResolver()
        self._allowed = address_allowed

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            if not self._allowed(ipaddress.ip_address(result["host"])):
                raise ForbiddenAddress(host, result["host"])
        return results

    async def close(self) -> None:
        await self._inner.close()


class ImageFetcher:
    def __init__(
        self,
        *,
        allow_private: bool,
        connect_timeout_s: float,
        read_timeout_s: float,
        total_timeout_s: float,
        max_bytes: int,
        max_redirects: int,
        pool_size: int,
        fetches_per_request: int,
        address_allowed: Callable[[IpAddress], bool] | None = None,
    ) -> None:
        allowed = address_allowed or is_public_address
        self._address_allowed: Callable[[IpAddress], bool] = (
            (lambda _ip: True) if allow_private else allowed
        )
        self._timeout = aiohttp.ClientTimeout(
            total=total_timeout_s,
            sock_connect=connect_timeout_s,
            sock_read=read_timeout_s,
        )
        self._max_bytes = max_bytes
        self._max_redirects = max_redirects
        self._pool_size = pool_size
        self._fetches_per_request = fetches_per_request
        self._session: aiohttp.ClientSession | None = None

    async def _get_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self._address_allowed),
                limit=self._pool_size,
                ttl_dns_cache=0,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self._timeout, auto_decompress=False
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def for_request(self) -> RequestFetches:
        """The fetches of one request: its fair share of the shared connection pool."""
        return RequestFetches(self, self._fetches_per_request)

    async def fetch(self, index: int, source: str) -> bytes:
        try:
            return await self._fetch(index, source)
        except ImageFetchFailed as error:
            IMAGE_FETCH_FAILURES.labels(error.reason).inc()
            raise

    async def _fetch(self, index: int, source: str) -> bytes:
        if source.startswith("data:"):
            return self._data_uri(index, source)
        try:
            return await self._fetch_url(index, source)
        except ForbiddenAddress as error:
            raise ImageFetchFailed(
                "forbidden_address",
                f"image.{index}: refused: {error.host} resolves to a non-public address",
            ) from None
        except InvalidHost as error:
            raise ImageFetchFailed("bad_url", f"image.{index}: {error}") from None
        except TimeoutError:
            raise ImageFetchFailed(
                "timeout", f"image.{index}: timed out fetching the URL"
            ) from None
        except aiohttp.ClientError as error:
            raise ImageFetchFailed(
                "connection", f"image.{index}: could not fetch the URL ({type(error).__name__})"
            ) from None

    def _checked(self, index: int, url: URL) -> URL:
        """``url`` as it will be fetched (host normalised), once its target is allowed."""
        if url.scheme not in ("http", "https"):
            raise ImageFetchFailed(
                "scheme", f"image.{index}: only http, https and data:image URIs are accepted"
            )
        target, address = normalise_host(url)
        if address is not None and not self._address_allowed(address):
            shown = url.raw_host if str(address) == url.raw_host else f"{url.raw_host} ({address})"
            raise ImageFetchFailed(
                "forbidden_address", f"image.{index}: refused: {shown} is a non-public address"
            )
        return target

    async def _fetch_url(self, index: int, source: str) -> bytes:
        session = await self._get_session()
        url = parse_url(source)
        for _ in range(self._max_redirects + 1):
            url = self._checked(index, url)
            async with session.get(url, allow_redirects=False) as response:
                if response.status in _REDIRECTS:
                    location = response.headers.get("Location")
                    if not location:
                        raise ImageFetchFailed(
                            "bad_redirect", f"image.{index}: redirect without a Location"
                        )
                    url = self._redirect_target(index, url, location)
                    continue
                if response.status != 200:
                    raise ImageFetchFailed(
                        "http_status", f"image.{index}: the URL answered HTTP {response.status}"
                    )
                self._check_content_type(index, response.headers.get("Content-Type", ""))
                return await self._read_limited(index, response)
        raise ImageFetchFailed(
            "too_many_redirects", f"image.{index}: more than {self._max_redirects} redirects"
        )

    @staticmethod
    def _redirect_target(index: int, url: URL, location: str) -> URL:
        try:
            return url.join(parse_url(location))
        except ValueError:
            raise ImageFetchFailed(
                "bad_redirect", f"image.{index}: the redirect's Location is not a valid URL"
            ) from None

    @staticmethod
    def _check_content_type(index: int, content_type: str) -> None:
        kind = content_type.split(";")[0].strip().lower()
        if kind and not kind.startswith("image/") and kind != "application/octet-stream":
            raise ImageFetchFailed(
                "content_type", f"image.{index}: content type {kind!r} is not an image"
            )

    async def _read_limited(self, index: int, response: Any) -> bytes:
        declared = response.content_length
        if declared is not None and declared > self._max_bytes:
            raise ImageFetchFailed("too_large", self._too_large(index))
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.content.iter_chunked(64 * 1024):
            size += len(chunk)
            if size > self._max_bytes:
                raise ImageFetchFailed("too_large", self._too_large(index))
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, index: int) -> str:
        return f"image.{index}: larger than the limit of {self._max_bytes} bytes"

    def _data_uri(self, index: int, source: str) -> bytes:
        header, sep, payload = source[5:].partition(",")
        media = header.split(";")[0].strip().lower()
        if not sep or not media.startswith("image/") or ";base64" not in header.lower():
            raise ImageFetchFailed(
                "bad_data_uri", f"image.{index}: data URIs must look like data:image/...;base64,..."
            )
        if len(payload) * 3 // 4 > self._max_bytes:
            raise ImageFetchFailed("too_large", self._too_large(index))
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise ImageFetchFailed(
                "bad_data_uri", f"image.{index}: the data URI is not valid base64"
            ) from None


class RequestFetches:
    """One request's URLs, fetched at most ``limit`` at once through the shared fetcher.

    Without it, the request of 64 slow URLs held every connection of the shared pool and
    every other request's images waited behind it. ``data:`` URIs take no slot.
    """

    def __init__(self, fetcher: ImageFetcher, limit: int) -> None:
        self._fetcher = fetcher
        self._slots = asyncio.Semaphore(limit)

    async def fetch(self, index: int, source: str) -> bytes:
        if source.startswith("data:"):
            return await self._fetcher.fetch(index, source)
        async with self._slots:
            return await self._fetcher.fetch(index, source)
