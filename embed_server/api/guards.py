"""ASGI middleware that protects the service before a request reaches a handler.

- Access: each route declares who may call it (:mod:`embed_server.api.access`); with
  ``EMBED_API_KEY`` set, admin routes, and with ``EMBED_API_KEY_INFER=true`` read routes
  too, need ``Authorization: Bearer <key>`` (the scheme in any case). The request is
  matched to its route before its body is read; keys are compared in constant time and
  never logged.
- Body size: refused with 413 from the Content-Length header, or while streaming.
- Work in flight: inference requests beyond ``EMBED_MAX_INFLIGHT`` get 503 with
  ``Retry-After`` at once, instead of queueing without limit.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from embed_server.api.access import Access, RouteAccess

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Requests counted against the in-flight limit.
INFERENCE_PATHS = ("/infer", "/v1/embeddings")


async def _reply(
    send: Send, status: int, detail: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})


class _BodyTooLarge(HTTPException):
    """Raised while the app reads a streamed body; an HTTPException so FastAPI's body
    parsing passes it through as a 413 rather than "error parsing the body"."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"body: larger than the limit of {limit} bytes")


def bearer_token(authorization: bytes) -> bytes:
    """The credentials of an ``Authorization: Bearer`` header (the scheme is
    case-insensitive, RFC 9110), or b"" for any other header."""
    scheme, _, token = authorization.strip().partition(b" ")
    return token.strip() if scheme.lower() == b"bearer" else b""


class GuardMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: RouteAccess,
        max_body_bytes: int,
        max_inflight: int,
        api_key: str | None,
        api_key_infer: bool,
    ) -> None:
        self.app = app
        self._routes = routes
        self.max_body_bytes = max_body_bytes
        self.max_inflight = max_inflight
        self.inflight = 0
        self._key = api_key.encode() if api_key else None
        self._key_infer = api_key_infer

    def _authorized(self, scope: Scope) -> bool:
        if self._key is None:
            return True
        level = self._routes.level(scope)
        if level is Access.PUBLIC or (level is Access.READ and not self._key_infer):
            return True
        headers = dict(scope.get("headers") or [])
        supplied = bearer_token(headers.get(b"authorization", b""))
        return hmac.compare_digest(supplied, self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            await _reply(
                send,
                401,
                "authorization: a valid 'Bearer' API key is required",
                {"WWW-Authenticate": "Bearer"},
            )
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await _reply(send, 413, f"body: larger than the limit of {self.max_body_bytes} bytes")
            return
        is_inference = scope["path"].startswith(INFERENCE_PATHS)
        if is_inference and self.inflight >= self.max_inflight:
            await _reply(
                send,
                503,
                f"overloaded: {self.inflight} requests in flight (EMBED_MAX_INFLIGHT); "
                "retry shortly",
                {"Retry-After": "1"},
            )
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body_bytes:
                    raise _BodyTooLarge(self.max_body_bytes)
            return message

        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        if is_inference:
            self.inflight += 1
        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not started:
                await _reply(
                    send, 413, f"body: larger than the limit of {self.max_body_bytes} bytes"
                )
        finally:
            if is_inference:
                self.inflight -= 1
