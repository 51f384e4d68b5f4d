"""Wire types of the OpenAI-compatible routes (``/v1``), as OpenAI's API reference has them.

Unknown fields are ignored rather than refused: OpenAI clients add fields over time and
should keep working against this server.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(
        examples=["sentence-transformers/all-MiniLM-L6-v2"],
        description="a loaded model's id as /v1/models lists it (CLIP: name@pretrained)",
    )
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="a text, texts, or token ids of the model's own vocabulary"
    )
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None


class EmbeddingData(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingData]
    model: str
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorDetail
