"""The only module that talks to Triton, from each API process: inference over pooled HTTP
connections (:mod:`embed_server.triton_http`, the cheaper path per request), everything
else over one persistent gRPC (asyncio) channel.

Triton's failures are translated here into the service's errors, so callers never see a
``tritonclient`` exception: an unreachable server is 503, an unknown or unready model 404.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import numpy as np
import tritonclient.grpc.aio as grpcclient
from tritonclient.grpc import InferenceServerClientPlugin, Request
from tritonclient.utils import InferenceServerException

from embed_server.errors import (
    BadRequest,
    DeadlineExceeded,
    ModelNotFound,
    Overloaded,
    TritonError,
    TritonUnavailable,
    redact_paths,
)
from embed_server.triton_access import grpc_headers, http_headers
from embed_server.triton_http import (
    HEADER_LENGTH,
    ConnectionFailed,
    HttpConnectionPool,
    decode_infer_response,
    encode_infer_request,
)

_UNREACHABLE_HINTS = ("failed to connect", "connection refused", "socket closed", "connect failed")
# Triton's HTTP statuses, named as its gRPC statuses are, so one translation serves both.
_HTTP_STATUS_NAMES = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 503: "UNAVAILABLE"}


def _translate(error: InferenceServerException, model: str | None = None) -> Exception:
    return _translate_status(str(error.status() or ""), str(error.message() or ""), model)


def _translate_status(status: str, message: str, model: str | None) -> Exception:
    lowered = message.lower()
    if "exceeds maximum queue size" in lowered:
        return Overloaded("Triton's queue for this model is full; retry shortly")
    if "timeout expired" in lowered:
        return DeadlineExceeded("the request waited in Triton's queue past its deadline")
    if "UNAVAILABLE" in status and any(hint in lowered for hint in _UNREACHABLE_HINTS):
        return TritonUnavailable("Triton is not reachable")
    if "DEADLINE_EXCEEDED" in status:
        return DeadlineExceeded("Triton did not answer within the request deadline")
    if model is not None and (
        "NOT_FOUND" in status
        or "not found" in lowered
        or "is not ready" in lowered
        or "unavailable" in lowered
        or "unknown model" in lowered
    ):
        return ModelNotFound(f"model {model!r} is not loaded in Triton")
    if "INVALID_ARGUMENT" in status:
        return BadRequest(f"Triton refused the request: {message}")
    if "UNAVAILABLE" in status:
        return TritonUnavailable(f"Triton is not available: {message}")
    return TritonError(f"Triton error: {message}")


class _KeyHeader(InferenceServerClientPlugin):
    """Adds the key of a restricted Triton to every gRPC call, present and future."""

    def __init__(self, api_key: str) -> None:
        self._headers = grpc_headers(api_key)

    def __call__(self, request: Request) -> None:
        request.headers.update(self._headers)


class TritonGateway:
    def __init__(
        self,
        url: str,
        http_url: str,
        timeout_s: float,
        metrics_url: str = "",
        api_key: str | None = None,
    ) -> None:
        self._client = grpcclient.InferenceServerClient(url=url)
        if api_key:
            self._client.register_plugin(_KeyHeader(api_key))
        # Sent with each inference; Triton started with a key refuses requests without it.
        self._http_headers = http_headers(api_key)
        address = urlsplit(http_url)
        self._infer_pool = HttpConnectionPool(address.hostname or "127.0.0.1", address.port or 80)
        self._timeout_s = timeout_s
        # Last readiness seen by the watcher; lets /health answer without a round trip.
        self.last_known_ready = False
        # Last liveness seen by the watcher. A Triton that is alive but hung would hold
        # every request until its deadline; once the watcher has seen it stop answering,
        # requests are refused at once instead.
        self.last_known_live = True
        self._repository_lock = asyncio.Lock()
        self._metrics_url = metrics_url
        self._http: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        self._infer_pool.close()
        await self._client.close()
        if self._http is not None:
            await self._http.close()

    async def metrics_text(self) -> str:
        """Triton's own Prometheus exposition (``nv_*`` series), read from its metrics port."""
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0))
        try:
            async with self._http.get(self._metrics_url) as response:
                if response.status != 200:
                    raise TritonUnavailable(f"Triton metrics answered HTTP {response.status}")
                return await response.text()
        except (aiohttp.ClientError, TimeoutError):
            raise TritonUnavailable("Triton metrics are not reachable") from None

    async def is_live(self) -> bool:
        """Whether the server process answers; unlike readiness, this does not flip while
        a model is loading (strict readiness), so it tells a restart from a busy server."""
        try:
            return bool(await self._client.is_server_live(client_timeout=2.0))
        except InferenceServerException:
            return False

    async def is_ready(self) -> bool:
        try:
            return bool(await self._client.is_server_ready(client_timeout=2.0))
        except InferenceServerException:
            return False

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], timeout_s: float
    ) -> dict[str, np.ndarray]:
        """Run one request within ``timeout_s``, what remains of the caller's deadline.

        Triton gets the same time as its queue timeout, so a request still queued when the
        caller gives up is rejected there instead of computed for no one.
        """
        if not self.last_known_live:
            raise TritonUnavailable("Triton is not answering; retry shortly")
        if timeout_s <= 0:
            raise DeadlineExceeded("the request deadline passed before Triton was called")
        body, header_length = encode_infer_request(
            inputs, outputs, timeout_us=max(1, int(timeout_s * 1_000_000))
        )
        path = f"/v2/models/{quote(model, safe='')}/infer"
        try:
            async with asyncio.timeout(timeout_s):
                headers = {HEADER_LENGTH: str(header_length), **self._http_headers}
                reply = await self._infer_pool.post(path, headers, body)
        except TimeoutError:
            raise DeadlineExceeded("Triton did not answer within the request deadline") from None
        except ConnectionFailed:
            raise TritonUnavailable("Triton is not reachable") from None
        if reply.status != 200:
            status = _HTTP_STATUS_NAMES.get(reply.status, f"HTTP {reply.status}")
            raise _translate_status(status, reply.error_message(), model)
        try:
            arrays = decode_infer_response(reply)
            return {name: arrays[name] for name in outputs}
        except (ValueError, KeyError) as error:
            raise TritonError(f"Triton's reply could not be read: {error}") from None

    async def load(self, model: str, timeout_s: float) -> None:
        # One load or unload at a time from this process: Triton serialises repository
        # changes anyway, and a queue here keeps each call's timeout its own.
        async with self._repository_lock:
            await self._load(model, timeout_s)

    async def _load(self, model: str, timeout_s: float) -> None:
        try:
            await self._client.load_model(model, client_timeout=timeout_s)
        except InferenceServerException as error:
            translated = _translate(error)
            if isinstance(translated, TritonUnavailable):
                raise translated from None
            # Triton's message holds its model paths and, for the Python backend, a stack:
            # the first line says what went wrong, the rest stays in Triton's log.
            lines = str(error.message() or "").strip().splitlines()
            reason = redact_paths(lines[0] if lines else "no reason given", set())
            raise TritonError(f"Triton could not load {model!r}: {reason}") from None

    async def unload(self, model: str) -> None:
        async with self._repository_lock:
            await self._unload(model)

    async def _unload(self, model: str) -> None:
        try:
            await self._client.unload_model(model, client_timeout=self._timeout_s)
        except InferenceServerException as error:
            raise _translate(error, model) from None

    async def is_model_ready(self, model: str) -> bool:
        try:
            return bool(await self._client.is_model_ready(model, client_timeout=self._timeout_s))
        except InferenceServerException as error:
            translated = _translate(error, model)
            if isinstance(translated, TritonUnavailable):
                raise translated from None
            return False

    async def ready_models(self) -> set[str]:
        try:
            index = await self._client.get_model_repository_index(
                as_json=True, client_timeout=self._timeout_s
            )
        except InferenceServerException as error:
            raise _translate(error) from None
        return {m["name"] for m in index.get("models", []) if m.get("state") == "READY"}

    async def statistics(self) -> list[dict[str, Any]]:
        try:
            stats = await self._client.get_inference_statistics(
                as_json=True, client_timeout=self._timeout_s
            )
        except InferenceServerException as error:
            raise _translate(error) from None
        return list(stats.get("model_stats", []))
