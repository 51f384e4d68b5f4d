"""OpenAI-compatible routes: ``POST /v1/embeddings`` and ``GET /v1/models``.

Existing OpenAI clients (the official SDKs, LangChain, LlamaIndex) work unchanged with
``base_url`` pointed at ``/v1``. Errors on these routes take OpenAI's shape,
``{"error": {"message", "type", "param", "code"}}``, which those clients parse; the rest of
the API keeps its ``{"detail": ...}`` shape. A CLIP model's id is ``name@pretrained``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from fastapi import APIRouter, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from embed_server.api.access import Access, access
from embed_server.api.openai_schemas import (
    EmbeddingRequest,
    EmbeddingResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
)
from embed_server.embedding_format import to_base64, truncate
from embed_server.errors import ServiceError
from embed_server.inference import InferenceService
from embed_server.model_names import ModelRef
from embed_server.models import ModelManager
from embed_server.observability.metrics import record_usage
from embed_server.observability.middleware import note_model

_ERROR_TYPES = {404: "invalid_request_error", 502: "server_error", 503: "server_error"}
_ERROR_CODES = {404: "model_not_found", 422: "invalid_value"}
# Service messages name the native API's fields; OpenAI clients know these instead.
_FIELD_NAMES = {"model_name": "model", "pretrained": "model", "text": "input"}


def openai_error(status: int, message: str, param: str | None) -> JSONResponse:
    error_type = _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")
    code = _ERROR_CODES.get(status)
    body = {"message": message, "type": error_type, "param": param, "code": code}
    return JSONResponse({"error": body}, status_code=status)


def _from_service_error(error: ServiceError) -> JSONResponse:
    field, sep, rest = error.message.partition(": ")
    head = field.split(".")[0]
    if sep and " " not in field:
        param = _FIELD_NAMES.get(head, head)
        return openai_error(error.status_code, f"{param}{field[len(head) :]}: {rest}", param)
    return openai_error(error.status_code, error.message, None)


def _from_validation_error(error: RequestValidationError) -> JSONResponse:
    problems, params = [], []
    for item in error.errors():
        loc = [str(part) for part in item.get("loc", ()) if part != "body"]
        params.append(loc[0] if loc else None)
        problems.append(f"{'.'.join(loc) or 'body'}: {item.get('msg', 'invalid')}")
    return openai_error(400, "; ".join(problems), params[0] if params else None)


class OpenAIRoute(APIRoute):
    """A route whose failures are answered in OpenAI's error shape."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except ServiceError as error:
                return _from_service_error(error)
            except RequestValidationError as error:
                return _from_validation_error(error)

        return handle


router = APIRouter(prefix="/v1", route_class=OpenAIRoute)
_ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 502, 503)}


def _resolve(manager: ModelManager, model_id: str) -> ModelRef:
    name, sep, pretrained = model_id.partition("@")
    return manager.resolve(name, pretrained if sep else None)


def model_id(summary: dict[str, object]) -> str:
    pretrained = summary.get("pretrained")
    return f"{summary['model_name']}@{pretrained}" if pretrained else str(summary["model_name"])


def _split_input(
    value: str | list[str] | list[int] | list[list[int]],
) -> tuple[list[str] | None, list[list[int]] | None]:
    """Texts or token rows: a flat list of ints is one tokenised text."""
    if isinstance(value, str):
        return [value], None
    if value and isinstance(value[0], int):
        return None, [value]  # type: ignore[list-item]
    if value and isinstance(value[0], list):
        return None, value  # type: ignore[return-value]
    return value, None  # type: ignore[return-value]


@router.post(
    "/embeddings",
    response_model=EmbeddingResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.READ),
)
async def create_embeddings(body: EmbeddingRequest, request: Request) -> Response:
    ref = _resolve(request.app.state.models, body.model)
    note_model(request, body.model)
    inference: InferenceService = request.app.state.inference
    texts, token_rows = _split_input(body.input)
    if token_rows is not None:
        result = await inference.embed_token_ids(ref, token_rows)
    else:
        result = await inference.embed(ref, texts, None, None)
    vectors = result.text
    if body.dimensions is not None:
        vectors = truncate(vectors, body.dimensions)
    as_base64 = body.encoding_format == "base64"
    record_usage(body.model, result.token_count, 0)
    payload = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": to_base64(v) if as_base64 else v}
            for i, v in enumerate(vectors)
        ],
        "model": body.model,
        "usage": {"prompt_tokens": result.token_count, "total_tokens": result.token_count},
    }
    return Response(
        orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), media_type="application/json"
    )


@router.get(
    "/models", response_model=ModelList, responses=_ERRORS, openapi_extra=access(Access.READ)
)
async def list_models(request: Request) -> ModelList:
    manager: ModelManager = request.app.state.models
    cards = [
        ModelCard(id=model_id(summary), created=0, owned_by="embed-server")
        for summary in await manager.loaded_models()
    ]
    return ModelList(data=cards)
