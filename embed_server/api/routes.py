"""HTTP route handlers: parse, call the service, shape the response. Nothing else."""

from __future__ import annotations

import time

import orjson
from fastapi import APIRouter, Request, Response

from embed_server.api.access import Access, access
from embed_server.api.schemas import (
    ErrorResponse,
    HealthResponse,
    InferRequest,
    InferResponse,
    LoadClipRequest,
    LoadSentenceTransformerRequest,
    MessageResponse,
    ModelRequest,
    ModelsResponse,
)
from embed_server.inference import InferenceService
from embed_server.models import ModelManager
from embed_server.observability.metrics import record_usage
from embed_server.observability.middleware import note_model
from embed_server.statistics import model_stats
from embed_server.triton import TritonGateway

router = APIRouter()
_ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 422, 502, 503)}


def _manager(request: Request) -> ModelManager:
    return request.app.state.models


def _inference(request: Request) -> InferenceService:
    return request.app.state.inference


def _triton(request: Request) -> TritonGateway:
    return request.app.state.triton


@router.post(
    "/load_sentence_transformer_model",
    response_model=MessageResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.ADMIN),
)
async def load_sentence_transformer_model(
    body: LoadSentenceTransformerRequest, request: Request
) -> MessageResponse:
    manager = _manager(request)
    message = await manager.load(manager.resolve(body.model_name))
    return MessageResponse(message=message)


@router.post(
    "/load_clip_model",
    response_model=MessageResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.ADMIN),
)
async def load_clip_model(body: LoadClipRequest, request: Request) -> MessageResponse:
    manager = _manager(request)
    message = await manager.load(manager.resolve_clip(body.model_name, body.pretrained))
    return MessageResponse(message=message)


@router.post(
    "/infer", response_model=InferResponse, responses=_ERRORS, openapi_extra=access(Access.READ)
)
async def infer(body: InferRequest, request: Request) -> Response:
    started = time.perf_counter()
    ref = _manager(request).resolve(body.model_name, body.pretrained)
    note_model(request, body.model_name)
    result = await _inference(request).embed(ref, body.text, body.image, body.normalize)
    record_usage(body.model_name, result.token_count, len(body.image or ()))
    payload: dict[str, object] = {}
    if result.text is not None:
        payload["text_embeddings"] = result.text
    if result.image is not None:
        payload["image_embeddings"] = result.image
    payload["processingTimeMs"] = round((time.perf_counter() - started) * 1000, 3)
    return Response(
        orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


@router.post(
    "/unload_model",
    response_model=MessageResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.ADMIN),
)
async def unload_model(body: ModelRequest, request: Request) -> MessageResponse:
    manager = _manager(request)
    return MessageResponse(
        message=await manager.unload(manager.resolve(body.model_name, body.pretrained))
    )


@router.post(
    "/delete_model",
    response_model=MessageResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.ADMIN),
)
async def delete_model(body: ModelRequest, request: Request) -> MessageResponse:
    manager = _manager(request)
    return MessageResponse(
        message=await manager.delete(manager.resolve(body.model_name, body.pretrained))
    )


@router.get(
    "/loaded_models",
    response_model=ModelsResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.READ),
)
async def loaded_models(request: Request) -> ModelsResponse:
    return ModelsResponse(models=await _manager(request).loaded_models())


@router.get(
    "/repository_models",
    response_model=ModelsResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.READ),
)
async def repository_models(request: Request) -> ModelsResponse:
    return ModelsResponse(models=await _manager(request).repository_models())


@router.get("/metrics", responses=_ERRORS, openapi_extra=access(Access.READ))
async def metrics(request: Request) -> dict[str, object]:
    return {"model_stats": model_stats(await _triton(request).statistics())}


@router.get("/health", response_model=HealthResponse, openapi_extra=access(Access.PUBLIC))
async def health(request: Request) -> HealthResponse:
    """Liveness: answers at once whenever the API process runs; ``triton_ready`` is what
    the background watcher saw last (at most half a second old), not a fresh round trip."""
    return HealthResponse(status="ok", triton_ready=_triton(request).last_known_ready)


@router.get(
    "/ready", response_model=MessageResponse, responses=_ERRORS, openapi_extra=access(Access.PUBLIC)
)
async def ready(request: Request, response: Response) -> MessageResponse:
    """Readiness: 200 only while Triton is ready and the default models are loaded; the
    message names models that could not be restored."""
    is_ready, message = await request.app.state.readiness()
    if not is_ready:
        response.status_code = 503
    return MessageResponse(message=message)
