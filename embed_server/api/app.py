"""Build the FastAPI application: wire settings, Triton, the repository and the services."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from embed_server.api.access import RouteAccess, documentation_paths
from embed_server.api.guards import GuardMiddleware
from embed_server.api.job_routes import router as job_router
from embed_server.api.observability_routes import router as observability_router
from embed_server.api.openai_routes import router as openai_router
from embed_server.api.routes import router
from embed_server.errors import ServiceError
from embed_server.exposure import check_api_exposure, key_value
from embed_server.image_fetch import ImageFetcher
from embed_server.inference import InferenceService, RequestLimits
from embed_server.inflight import InflightTracker
from embed_server.jobs import JobStore, LoadJobs
from embed_server.models import ModelManager
from embed_server.observability.logs import configure_logging
from embed_server.observability.middleware import RequestObserver
from embed_server.recovery import TritonWatcher
from embed_server.repository import ModelRepository
from embed_server.settings import Settings, get_settings
from embed_server.triton import TritonGateway

logger = logging.getLogger("embed_server")


def _build_services(
    app: FastAPI, settings: Settings
) -> tuple[ImageFetcher, list[ThreadPoolExecutor]]:
    repository = ModelRepository(settings.model_repository)
    for leftover in repository.remove_leftovers(older_than_s=settings.conversion_timeout_s):
        logger.warning("removed unfinished folder %s", leftover)
    triton = TritonGateway(
        settings.triton_grpc_url,
        settings.resolved_triton_http_url(),
        settings.triton_timeout_s,
        settings.resolved_triton_metrics_url(),
        api_key=key_value(settings.triton_api_key),
    )
    inflight = InflightTracker()
    fetcher = ImageFetcher(
        allow_private=settings.allow_private_urls,
        connect_timeout_s=settings.image_connect_timeout_s,
        read_timeout_s=settings.image_read_timeout_s,
        total_timeout_s=settings.image_total_timeout_s,
        max_bytes=settings.image_max_bytes,
        max_redirects=settings.image_max_redirects,
        pool_size=settings.image_fetch_pool_size,
        fetches_per_request=settings.image_fetches_per_request,
    )
    image_pool = ThreadPoolExecutor(
        max_workers=settings.image_decode_workers, thread_name_prefix="image"
    )
    text_pool = ThreadPoolExecutor(
        max_workers=settings.tokenize_workers, thread_name_prefix="tokenize"
    )
    limits = RequestLimits(
        max_items=settings.max_items_per_request,
        max_text_chars=settings.max_text_chars,
        max_images=settings.max_images_per_request,
        max_pixels=settings.image_max_pixels,
        deadline_s=settings.request_timeout_s,
    )
    app.state.triton = triton
    app.state.models = ModelManager(settings, repository, triton, inflight)
    app.state.inference = InferenceService(
        repository,
        triton,
        fetcher,
        image_pool,
        text_pool,
        limits,
        inflight,
        app.state.models.loaded_set,
        settings.pad_to_multiple_of,
    )
    app.state.jobs = LoadJobs(JobStore(repository.root / ".jobs"), app.state.models)
    app.state.watcher = TritonWatcher(triton, app.state.models, settings.default_models)
    return fetcher, [image_pool, text_pool]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # Also here, not only in `serve`: `uvicorn app:app` starts the API on its own.
    check_api_exposure(settings)
    configure_logging(settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        fetcher, pools = _build_services(app, settings)
        watcher = asyncio.create_task(app.state.watcher.run_forever())
        try:
            yield
        finally:
            watcher.cancel()
            await app.state.jobs.close()
            await fetcher.close()
            for pool in pools:
                pool.shutdown(wait=False, cancel_futures=True)
            await app.state.triton.close()

    async def readiness() -> tuple[bool, str]:
        """Whether the service is ready, and why not or what it lacks.

        A default model that could not be restored keeps the service unready; any other
        such model is named while the service stays ready for the rest, so one broken
        model does not take every replica out of rotation. Hence Triton's liveness, not its
        own readiness: with strict readiness one model that failed to load (or is loading)
        makes all of Triton report not-ready.
        """
        if not await app.state.triton.is_live():
            return False, "Triton is not ready"
        failures = app.state.models.loaded_set.failures()
        failed = "; ".join(f"{f.label}: {f.reason}" for f in failures)
        if any(f.model_name in settings.default_models for f in failures):
            return False, f"models could not be restored (load them again): {failed}"
        loaded = {m["model_name"] for m in await app.state.models.loaded_models()}
        missing = [name for name in settings.default_models if name not in loaded]
        if missing:
            return False, f"default models not loaded yet: {', '.join(missing)}"
        if failed:
            return True, f"ready, but models could not be restored (load them again): {failed}"
        return True, "ready"

    app = FastAPI(title="Triton embedding server", lifespan=lifespan)
    app.state.readiness = readiness
    app.include_router(router)
    app.include_router(openai_router)
    app.include_router(job_router)
    app.include_router(observability_router)
    app.add_middleware(
        GuardMiddleware,
        routes=RouteAccess(app.router, documentation_paths(app)),
        max_body_bytes=settings.max_body_bytes,
        max_inflight=settings.max_inflight,
        api_key=key_value(settings.api_key),
        api_key_infer=settings.api_key_infer,
    )
    # Added last, so outermost: refusals by the guards are logged and counted too.
    app.add_middleware(RequestObserver)

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, error: ServiceError) -> JSONResponse:
        retry_after = getattr(error, "retry_after_s", None)
        headers = {"Retry-After": str(retry_after)} if retry_after else None
        return JSONResponse(
            {"detail": error.message}, status_code=error.status_code, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, error: RequestValidationError) -> JSONResponse:
        problems = []
        for item in error.errors():
            where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
            problems.append(f"{where or 'body'}: {item.get('msg', 'invalid')}")
        return JSONResponse({"detail": "; ".join(problems)}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected_error(_: Request, error: Exception) -> JSONResponse:
        logger.exception("unhandled error", exc_info=error)
        return JSONResponse({"detail": "internal server error"}, status_code=500)

    return app
