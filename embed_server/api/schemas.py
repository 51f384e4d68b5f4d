"""Wire types of the HTTP API, apart from the handlers that use them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoadSentenceTransformerRequest(_Strict):
    model_name: str = Field(examples=["sentence-transformers/all-MiniLM-L6-v2"])


class LoadClipRequest(_Strict):
    model_name: str = Field(examples=["ViT-B-32"])
    pretrained: str | None = Field(
        default=None,
        examples=["laion2b_s34b_b79k"],
        description="an open_clip pretrained tag, or an absolute checkpoint path inside "
        "EMBED_LOCAL_MODEL_DIRS; not needed for hf-hub: models",
    )


class ModelRequest(_Strict):
    """Names a model for unload and delete; ``pretrained`` only for CLIP models."""

    model_name: str
    pretrained: str | None = None


class InferRequest(_Strict):
    model_name: str = Field(examples=["sentence-transformers/all-MiniLM-L6-v2"])
    pretrained: str | None = None
    text: list[str] | None = Field(default=None, examples=[["I am a sentence."]])
    image: list[str] | None = None
    normalize: bool | None = Field(
        default=None, description="L2-normalise the embeddings; default: the model's own behaviour"
    )

    @field_validator("text", "image", mode="before")
    @classmethod
    def _single_to_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class MessageResponse(BaseModel):
    message: str


class InferResponse(BaseModel):
    text_embeddings: list[list[float]] | None = None
    image_embeddings: list[list[float]] | None = None
    processingTimeMs: float  # noqa: N815 - the API's established field name


class ModelSummary(BaseModel):
    model_config = ConfigDict(extra="allow")

    model_name: str
    kind: str
    triton_models: dict[str, str]


class ModelsResponse(BaseModel):
    models: list[ModelSummary]


class HealthResponse(BaseModel):
    status: str
    triton_ready: bool


class ErrorResponse(BaseModel):
    detail: str
