"""Request logging, JSON log lines and failure counters, without a server."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys

import httpx
import pytest
from fastapi import FastAPI, Request
from prometheus_client import REGISTRY

from embed_server.errors import BadRequest
from embed_server.image_fetch import ImageFetcher
from embed_server.observability.logs import JsonFormatter, RequestIdFilter
from embed_server.observability.middleware import RequestObserver, note_model
from tests.conftest import PROJECT_ROOT


def json_lines_of(app: FastAPI, *requests: tuple[str, dict[str, str]]) -> list[dict]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    access = logging.getLogger("embed_server.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            for path, headers in requests:
                await client.get(path, headers=headers)

    try:
        asyncio.run(run())
    finally:
        access.removeHandler(handler)
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_log_line_has_route_model_status_duration_and_request_id():
    app = FastAPI()

    @app.get("/things/{thing}")
    async def thing(thing: str, request: Request) -> dict[str, str]:
        note_model(request, "some-model")
        return {"thing": thing}

    app.add_middleware(RequestObserver)
    lines = json_lines_of(app, ("/things/42", {"X-Request-ID": "abc-1"}), ("/nowhere", {}))
    assert len(lines) == 2
    first, second = lines
    assert first["route"] == "/things/{thing}"
    assert first["path"] == "/things/42"
    assert first["model"] == "some-model"
    assert first["status"] == 200
    assert first["duration_ms"] > 0
    assert first["request_id"] == "abc-1"
    assert first["logger"] == "embed_server.access"
    assert second["route"] == "unmatched"
    assert second["status"] == 404
    assert len(second["request_id"]) == 32


def test_image_fetch_failures_are_counted_by_reason():
    def count() -> float:
        value = REGISTRY.get_sample_value("embed_image_fetch_failures_total", {"reason": "scheme"})
        return value or 0.0

    async def run() -> None:
        fetcher = ImageFetcher(
            allow_private=False,
            connect_timeout_s=1,
            read_timeout_s=1,
            total_timeout_s=1,
            max_bytes=100,
            max_redirects=0,
            pool_size=4,
            fetches_per_request=2,
        )
        try:
            await fetcher.fetch(0, "ftp://example.com/cat.png")
        finally:
            await fetcher.close()

    before = count()
    with pytest.raises(BadRequest, match=r"^image\.0: only http"):
        asyncio.run(run())
    assert count() - before == 1


def test_multiprocess_mode_sums_what_every_worker_recorded(tmp_path):
    """With PROMETHEUS_MULTIPROC_DIR set (as serve does for several workers) counts add up."""
    record = (
        "from embed_server.observability import metrics\n"
        "metrics.record_request('/infer', 'm', 200, 0.01)\n"
        "metrics.IN_FLIGHT.inc()\n"
    )
    read = (
        "from embed_server.observability.dashboard_data import facade_figures\n"
        "import json; print(json.dumps(facade_figures()))\n"
    )
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for _ in range(2):
        subprocess.run([sys.executable, "-c", record], env=env, check=True, cwd=PROJECT_ROOT)
    out = subprocess.run(
        [sys.executable, "-c", read], env=env, check=True, capture_output=True, cwd=PROJECT_ROOT
    )
    figures = json.loads(out.stdout)
    assert figures["requests_by_route"] == {"/infer": 2.0}
    assert figures["latency_buckets"][-1] == [None, 2.0]
