"""ASGI middleware that protects the service before a request reaches a handler.

- Body size: refused with 413 from the Content-Length header, or while streaming.
- Work in flight: inference requests beyond ``EMBED_MAX_INFLIGHT`` get 503 with
  ``Retry-After`` at once, instead of queueing without limit.
- Access: with ``EMBED_API_KEY`` set, model management needs ``Authorization: Bearer``;
  ``EMBED_API_KEY_INFER=true`` extends that to inference and metrics. Keys are compared
  in constant time and never logged.

Paths are classified by prefix so routes added later are covered without touching this.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

INFERENCE_PATHS = ("/infer", "/v1/embeddings")
ADMIN_PATHS = (
    "/load_sentence_transformer_model",
    "/load_clip_model",
    "/unload_model",
    "/delete_model",
    "/jobs",
)
PROTECTED_WITH_INFER = (*INFERENCE_PATHS, "/metrics", "/v1/models", "/dashboard")


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


class GuardMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_inflight: int,
        api_key: str | None,
        api_key_infer: bool,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_inflight = max_inflight
        self.inflight = 0
        self._key = api_key.encode() if api_key else None
        self._key_infer = api_key_infer

    def _authorized(self, scope: Scope) -> bool:
        path: str = scope["path"]
        protected = path.startswith(ADMIN_PATHS) or (
            self._key_infer and path.startswith(PROTECTED_WITH_INFER)
        )
        if self._key is None or not protected:
            return True
        headers = dict(scope.get("headers") or [])
        supplied = headers.get(b"authorization", b"")
        expected = b"Bearer " + self._key
        return hmac.compare_digest(supplied, expected)

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
