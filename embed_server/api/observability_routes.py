"""Routes for operators: the Prometheus scrape, the live dashboard page and its data."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST

from embed_server.api.access import Access, access
from embed_server.observability.dashboard_data import dashboard_data
from embed_server.observability.exposition import prometheus_text

router = APIRouter()
_PAGE = Path(__file__).with_name("dashboard.html")


@cache
def _page() -> str:
    return _PAGE.read_text()


@router.get(
    "/metrics/prometheus", response_class=PlainTextResponse, openapi_extra=access(Access.READ)
)
async def prometheus(request: Request) -> PlainTextResponse:
    """The facade's series and Triton's ``nv_*`` series in one text exposition."""
    text = await prometheus_text(request.app.state.triton)
    return PlainTextResponse(text, media_type=CONTENT_TYPE_LATEST)


@router.get("/dashboard", response_class=HTMLResponse, openapi_extra=access(Access.PUBLIC))
async def dashboard() -> HTMLResponse:
    """One self-contained page (no external assets) that polls ``/dashboard/data``."""
    return HTMLResponse(_page())


@router.get("/dashboard/data", openapi_extra=access(Access.READ))
async def data(request: Request) -> dict[str, Any]:
    return await dashboard_data(request.app.state.models, request.app.state.triton)
