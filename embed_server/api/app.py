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

from embed_server.api.job_routes import router as job_router
from embed_server.api.observability_routes import router as observability_router
from embed_server.api.openai_routes import router as openai_router
from embed_server.api.routes import router
from embed_server.errors import ServiceError
from embed_server.image_fetch import ImageFetcher
from embed_server.inference import ImageLimits, InferenceService
from embed_server.jobs import JobStore, LoadJobs
from embed_server.models import ModelManager
from embed_server.observability.logs import configure_logging
from embed_server.observability.middleware import RequestObserver
from embed_server.repository import ModelRepository
from embed_server.settings import Settings, get_settings
from embed_server.triton import TritonGateway

logger = logging.getLogger("embed_server")
_TRITON_WAIT_S = 120.0


async def _load_defaults(app: FastAPI, settings: Settings) -> None:
    """Load the configured default models once Triton answers; failures are logged."""
    manager: ModelManager = app.state.models
    deadline = asyncio.get_running_loop().time() + _TRITON_WAIT_S
    while not await app.state.triton.is_ready():
        if asyncio.get_running_loop().time() > deadline:
            logger.error("Triton not ready after %.0f s; default models not loaded", _TRITON_WAIT_S)
            return
        await asyncio.sleep(0.5)
    for name in settings.default_models:
        try:
            logger.info("loading default model %s", name)
            logger.info(await manager.load(manager.resolve(name)))
        except ServiceError as error:
            logger.error("default model %s not loaded: %s", name, error.message)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    configure_logging(settings.log_json)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        repository = ModelRepository(settings.model_repository)
        for leftover in repository.remove_leftovers(older_than_s=settings.conversion_timeout_s):
            logger.warning("removed unfinished folder %s", leftover)
        triton = TritonGateway(
            settings.triton_grpc_url,
            settings.triton_timeout_s,
            settings.resolved_triton_metrics_url(),
        )
        app.state.triton = triton
        app.state.models = ModelManager(settings, repository, triton)
        app.state.jobs = LoadJobs(JobStore(repository.root / ".jobs"), app.state.models)
        fetcher = ImageFetcher(
            allow_private=settings.allow_private_urls,
            connect_timeout_s=settings.image_connect_timeout_s,
            read_timeout_s=settings.image_read_timeout_s,
            total_timeout_s=settings.image_total_timeout_s,
            max_bytes=settings.image_max_bytes,
            max_redirects=settings.image_max_redirects,
        )
        image_pool = ThreadPoolExecutor(
            max_workers=settings.image_decode_workers, thread_name_prefix="image"
        )
        app.state.inference = InferenceService(
            repository,
            triton,
            fetcher,
            image_pool,
            ImageLimits(settings.max_images_per_request, settings.image_max_pixels),
            settings.pad_to_multiple_of,
        )

        async def readiness() -> str:
            if not await triton.is_ready():
                return "Triton is not ready"
            loaded = {m["model_name"] for m in await app.state.models.loaded_models()}
            missing = [name for name in settings.default_models if name not in loaded]
            return f"default models not loaded yet: {', '.join(missing)}" if missing else ""

        app.state.readiness = readiness
        defaults = asyncio.create_task(_load_defaults(app, settings))
        try:
            yield
        finally:
            defaults.cancel()
            await app.state.jobs.close()
            await fetcher.close()
            image_pool.shutdown(wait=False, cancel_futures=True)
            await triton.close()

    app = FastAPI(title="Triton embedding server", lifespan=lifespan)
    app.include_router(router)
    app.include_router(openai_router)
    app.include_router(job_router)
    app.include_router(observability_router)
    app.add_middleware(RequestObserver)

    @app.exception_handler(ServiceError)
    async def service_error(_: Request, error: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": error.message}, status_code=error.status_code)

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
