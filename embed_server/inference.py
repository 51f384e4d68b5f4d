"""One embedding request from validated input to arrays: preprocess, call Triton, postprocess.

Requests larger than the model's ``max_batch_size`` are cut into chunks sent concurrently,
so Triton's dynamic batcher can interleave them with other clients' requests.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from embed_server.errors import BadRequest, ModelNotFound
from embed_server.model_names import ModelRef
from embed_server.preprocessing.text import TextPreprocessor
from embed_server.repository import ModelRepository
from embed_server.triton import TritonGateway

# Tokenising more characters than this in one go moves off the event loop.
_INLINE_TOKENIZE_CHARS = 20_000


@dataclass
class Embeddings:
    text: np.ndarray | None
    token_count: int


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class InferenceService:
    def __init__(self, repository: ModelRepository, triton: TritonGateway, pad_to_multiple_of: int):
        self._repository = repository
        self._triton = triton
        self._pad_to_multiple_of = pad_to_multiple_of
        self._preprocessors: dict[str, tuple[dict[str, Any], TextPreprocessor]] = {}

    def _model(self, ref: ModelRef) -> dict[str, Any]:
        metadata = self._repository.metadata(ref.triton_base)
        if metadata is None:
            raise ModelNotFound(f"model_name: {ref.name!r} is not loaded")
        return metadata

    def _text_preprocessor(self, ref: ModelRef, metadata: dict[str, Any]) -> TextPreprocessor:
        """The model's tokenizer, rebuilt whenever its metadata was re-read (re-converted)."""
        cached = self._preprocessors.get(ref.triton_base)
        if cached is not None and cached[0] is metadata:
            return cached[1]
        multiple = self._pad_to_multiple_of if metadata.get("backend") == "onnxruntime" else 1
        folder = self._repository.path(ref.triton_base)
        preprocessor = TextPreprocessor.from_model_dir(folder, metadata, multiple)
        self._preprocessors[ref.triton_base] = (metadata, preprocessor)
        return preprocessor

    async def embed(
        self,
        ref: ModelRef,
        texts: list[str] | None,
        images: list[str] | None,
        normalize: bool | None,
    ) -> Embeddings:
        metadata = self._model(ref)
        if images:
            raise BadRequest(f"image: {ref.name!r} is a text model and takes no images")
        if not texts:
            raise BadRequest("text: give at least one text")
        preprocessor = self._text_preprocessor(ref, metadata)
        triton_model = metadata["triton_models"]["text"]
        output = "unnormalized" if normalize is False else "embedding"
        chunk = int(metadata.get("max_batch_size", 64))
        pieces = [texts[i : i + chunk] for i in range(0, len(texts), chunk)]

        async def run(piece: list[str]) -> tuple[np.ndarray, int]:
            if sum(len(t) for t in piece) > _INLINE_TOKENIZE_CHARS:
                batch = await asyncio.to_thread(preprocessor.encode, piece)
            else:
                batch = preprocessor.encode(piece)
            result = await self._triton.infer(
                triton_model,
                {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask},
                [output],
            )
            return result[output], sum(batch.token_counts)

        results = await asyncio.gather(*(run(p) for p in pieces))
        vectors = np.concatenate([r[0] for r in results])
        if normalize and not metadata.get("normalized"):
            vectors = l2_normalize(vectors)
        return Embeddings(text=vectors, token_count=sum(r[1] for r in results))
