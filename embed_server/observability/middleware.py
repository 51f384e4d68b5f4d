"""Per-request bookkeeping as one ASGI middleware: request id, metrics, one access-log line.

Pure ASGI rather than ``BaseHTTPMiddleware`` so responses stream through untouched and no
extra task is spawned per request. Handlers name the request's model with
:func:`note_model`; the route label is the matched route's template (``/jobs/{job_id}``),
so label values stay bounded whatever paths clients send.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from embed_server.observability import metrics
from embed_server.observability.logs import REQUEST_ID

access_log = logging.getLogger("embed_server.access")
REQUEST_ID_HEADER = "X-Request-ID"
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:/+=-]{1,128}$")


def note_model(request: Request, model: str) -> None:
    """Label this request's metrics and log line with the model it asked for."""
    request.state.model = model


def _request_id(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            if _CLIENT_ID.match(candidate):
                return candidate
    return uuid.uuid4().hex


class RequestObserver:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        token = REQUEST_ID.set(request_id)
        state = scope.setdefault("state", {})
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append(REQUEST_ID_HEADER, request_id)
            await send(message)

        started = time.perf_counter()
        metrics.IN_FLIGHT.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            metrics.IN_FLIGHT.dec()
            duration = time.perf_counter() - started
            route = getattr(scope.get("route"), "path", "unmatched")
            # A 404 may name any model at all; keep such names out of the label set.
            model = "" if status == 404 else str(state.get("model", ""))
            metrics.record_request(route, model, status, duration)
            access_log.info(
                "%s %s %s %d %.1f ms",
                scope["method"],
                route,
                model or "-",
                status,
                duration * 1000,
                extra={
                    "method": scope["method"],
                    "route": route,
                    "path": scope["path"],
                    "model": model or None,
                    "status": status,
                    "duration_ms": round(duration * 1000, 3),
                },
            )
            REQUEST_ID.reset(token)
