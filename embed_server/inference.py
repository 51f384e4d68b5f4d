"""One embedding request from validated input to arrays: preprocess, call Triton, postprocess.

Texts and images of one request run concurrently. Inputs larger than the model's
``max_batch_size`` are cut into chunks sent concurrently, so Triton's dynamic batcher can
interleave them with other clients' requests. Tokenising long inputs and decoding images
run off the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from embed_server.errors import (
    BadRequest,
    DeadlineExceeded,
    ModelNotFound,
    PayloadTooLarge,
    TritonUnavailable,
)
from embed_server.image_fetch import ImageFetcher
from embed_server.inflight import InflightTracker
from embed_server.loaded_set import LoadedSet
from embed_server.model_names import ModelRef
from embed_server.observability.metrics import record_padding
from embed_server.preprocessing.clip_hf_tokenizer import HfClipTokenizer
from embed_server.preprocessing.clip_tokenizer import ClipTokenizer
from embed_server.preprocessing.image import ImageSpec, decode_and_prepare
from embed_server.preprocessing.text import TextPreprocessor
from embed_server.repository import ModelRepository
from embed_server.triton import TritonGateway

T = TypeVar("T")

# Tokenising more characters than this in one go moves off the event loop.
_INLINE_TOKENIZE_CHARS = 20_000


@dataclass
class Embeddings:
    text: np.ndarray | None
    image: np.ndarray | None
    token_count: int


@dataclass(frozen=True)
class RequestLimits:
    max_items: int
    max_text_chars: int
    max_images: int
    max_pixels: int
    deadline_s: float


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class InferenceService:
    def __init__(
        self,
        repository: ModelRepository,
        triton: TritonGateway,
        fetcher: ImageFetcher,
        image_pool: ThreadPoolExecutor,
        limits: RequestLimits,
        inflight: InflightTracker,
        loaded_set: LoadedSet,
        pad_to_multiple_of: int,
    ) -> None:
        self._repository = repository
        self._triton = triton
        self._fetcher = fetcher
        self._image_pool = image_pool
        self._limits = limits
        self._inflight = inflight
        self._loaded_set = loaded_set
        self._pad_to_multiple_of = pad_to_multiple_of
        self._tokenizers: dict[str, tuple[dict[str, Any], Any]] = {}

    def _model(self, ref: ModelRef) -> dict[str, Any]:
        metadata = self._repository.metadata(ref.primary)
        if metadata is None:
            label = ref.name if ref.pretrained is None else f"{ref.name} ({ref.pretrained})"
            raise ModelNotFound(f"model_name: {label!r} is not loaded")
        return metadata

    def _tokenizer(self, ref: ModelRef, metadata: dict[str, Any]) -> Any:
        """The model's tokenizer, rebuilt whenever its metadata was re-read (re-converted)."""
        cached = self._tokenizers.get(ref.primary)
        if cached is not None and cached[0] is metadata:
            return cached[1]
        folder = self._repository.path(ref.primary)
        if metadata["kind"] == "clip":
            text = metadata["text"]
            tokenizer: Any
            if text["type"] == "hf":
                tokenizer = HfClipTokenizer(folder / text["tokenizer_file"], text)
            else:
                tokenizer = ClipTokenizer(
                    folder / text["vocab_file"], int(text["context_length"]), text["clean"]
                )
        else:
            native = metadata.get("backend") == "onnxruntime"
            multiple = self._pad_to_multiple_of if native else 1
            tokenizer = TextPreprocessor.from_model_dir(folder, metadata, multiple)
        self._tokenizers[ref.primary] = (metadata, tokenizer)
        return tokenizer

    def _check_input(
        self,
        ref: ModelRef,
        metadata: dict[str, Any],
        texts: list[str] | None,
        images: list[str] | None,
    ) -> None:
        limits = self._limits
        if texts is not None and not texts:
            raise BadRequest("text: give at least one text, or leave the field out")
        if images is not None and not images:
            raise BadRequest("image: give at least one image, or leave the field out")
        if not texts and not images:
            raise BadRequest("text: give at least one text (or image, for CLIP models)")
        if images and "image" not in metadata["triton_models"]:
            raise BadRequest(f"image: {ref.name!r} is a text model and takes no images")
        count = len(texts or []) + len(images or [])
        if count > limits.max_items:
            raise PayloadTooLarge(
                f"text: {count} items exceed the limit of {limits.max_items} per request"
            )
        if images and len(images) > limits.max_images:
            raise BadRequest(f"image: {len(images)} images exceed the limit of {limits.max_images}")
        for index, text in enumerate(texts or []):
            if len(text) > limits.max_text_chars:
                raise PayloadTooLarge(
                    f"text.{index}: {len(text)} characters exceed the limit of "
                    f"{limits.max_text_chars}"
                )

    async def embed(
        self,
        ref: ModelRef,
        texts: list[str] | None,
        images: list[str] | None,
        normalize: bool | None,
    ) -> Embeddings:
        """Embed within the request deadline (504 past it), counted as in flight."""
        metadata = self._model(ref)
        self._check_input(ref, metadata, texts, images)
        return await self._guarded(ref, self._embed(ref, metadata, texts, images, normalize))

    async def _guarded(self, ref: ModelRef, work: Coroutine[Any, Any, Embeddings]) -> Embeddings:
        with self._inflight.track(ref.primary):
            try:
                async with asyncio.timeout(self._limits.deadline_s):
                    return await work
            except TimeoutError:
                raise DeadlineExceeded(
                    f"the request took longer than {self._limits.deadline_s:.0f} s"
                ) from None
            except ModelNotFound:
                if self._loaded_set.contains(ref.name, ref.pretrained):
                    # Meant to be loaded: Triton restarted and the watcher is restoring it.
                    raise TritonUnavailable(
                        f"model_name: {ref.name!r} is being loaded again; retry shortly"
                    ) from None
                raise

    async def _embed(
        self,
        ref: ModelRef,
        metadata: dict[str, Any],
        texts: list[str] | None,
        images: list[str] | None,
        normalize: bool | None,
    ) -> Embeddings:
        # The raw output when the caller opts out of the model's own normalisation.
        output = (
            "unnormalized" if normalize is False and metadata.get("normalized") else "embedding"
        )
        text_job = self._embed_texts(ref, metadata, texts, output) if texts else None
        image_job = self._embed_images(metadata, images) if images else None
        jobs = [j for j in (text_job, image_job) if j is not None]
        results = await _all(jobs)
        text_result = results.pop(0) if text_job is not None else None
        image_vectors = results.pop(0) if image_job is not None else None
        text_vectors = text_result[0] if text_result else None
        if normalize and not metadata.get("normalized"):
            text_vectors = None if text_vectors is None else l2_normalize(text_vectors)
            image_vectors = None if image_vectors is None else l2_normalize(image_vectors)
        return Embeddings(
            text=text_vectors,
            image=image_vectors,
            token_count=text_result[1] if text_result else 0,
        )

    async def embed_token_ids(self, ref: ModelRef, rows: list[list[int]]) -> Embeddings:
        """Embed texts the client tokenised itself (ids of this model's vocabulary)."""
        metadata = self._model(ref)
        if metadata["kind"] != "sentence_transformer":
            raise BadRequest("input: token arrays are accepted for sentence-transformers only")
        if not rows:
            raise BadRequest("input: give at least one token array")
        if len(rows) > self._limits.max_items:
            raise PayloadTooLarge(
                f"input: {len(rows)} items exceed the limit of {self._limits.max_items}"
            )
        tokenizer = self._tokenizer(ref, metadata)
        tokenizer.check_ids(rows, int(metadata.get("max_seq_length", 512)))
        return await self._guarded(ref, self._embed_ids(metadata, tokenizer, rows))

    async def _embed_ids(
        self, metadata: dict[str, Any], tokenizer: TextPreprocessor, rows: list[list[int]]
    ) -> Embeddings:
        model = metadata["triton_models"]["text"]

        async def run(piece: list[list[int]]) -> np.ndarray:
            batch = tokenizer.pad_ids(piece)
            feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            return (await self._triton.infer(model, feeds, ["embedding"]))["embedding"]

        size = int(metadata.get("max_batch_size", 64))
        pieces = [rows[i : i + size] for i in range(0, len(rows), size)]
        outputs = await _all([run(piece) for piece in pieces])
        return Embeddings(np.concatenate(outputs), None, sum(len(row) for row in rows))

    async def _embed_texts(
        self, ref: ModelRef, metadata: dict[str, Any], texts: list[str], output: str
    ) -> tuple[np.ndarray, int]:
        tokenizer = self._tokenizer(ref, metadata)
        model = metadata["triton_models"]["text"]

        def tokenize(piece: list[str]) -> tuple[dict[str, np.ndarray], int]:
            if metadata["kind"] == "clip":
                ids, counts = tokenizer(piece)
                return {"input_ids": ids}, sum(counts)
            batch = tokenizer.encode(piece)
            feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            return feeds, sum(batch.token_counts)

        reports_padding = bool(metadata.get("reports_padding"))
        outputs = [output, "token_counts"] if reports_padding else [output]

        async def run(piece: list[str]) -> tuple[np.ndarray, int]:
            if sum(len(t) for t in piece) > _INLINE_TOKENIZE_CHARS:
                feeds, tokens = await asyncio.to_thread(tokenize, piece)
            else:
                feeds, tokens = tokenize(piece)
            result = await self._triton.infer(model, feeds, outputs)
            if reports_padding:
                counts = result["token_counts"]
                record_padding(ref.name, int(counts[:, 0].sum()), int(counts[:, 1].sum()))
            return result[output], tokens

        chunks = _chunks(texts, int(metadata.get("max_batch_size", 64)))
        results = await _all([run(chunk) for chunk in chunks])
        return np.concatenate([r[0] for r in results]), sum(r[1] for r in results)

    async def _embed_images(self, metadata: dict[str, Any], images: list[str]) -> np.ndarray:
        spec = ImageSpec.from_metadata(metadata["image"])
        loop = asyncio.get_running_loop()

        async def load(index: int, source: str) -> np.ndarray:
            data = await self._fetcher.fetch(index, source)
            return await loop.run_in_executor(
                self._image_pool, decode_and_prepare, data, index, spec, self._limits.max_pixels
            )

        tasks = [asyncio.ensure_future(load(i, s)) for i, s in enumerate(images)]
        try:
            pixels = np.stack(await asyncio.gather(*tasks))
        finally:
            for task in tasks:
                task.cancel()
        model = metadata["triton_models"]["image"]
        chunk = int(metadata.get("max_batch_size", 64))
        outputs = await _all(
            [
                self._triton.infer(model, {"pixels": pixels[i : i + chunk]}, ["embedding"])
                for i in range(0, len(pixels), chunk)
            ]
        )
        return np.concatenate([o["embedding"] for o in outputs])


async def _all(jobs: list[Coroutine[Any, Any, T]]) -> list[T]:
    """Await one job directly and several concurrently: a lone job (most requests) then
    costs no task and no extra turns of the event loop, about 0.1 ms on this CPU."""
    if len(jobs) == 1:
        return [await jobs[0]]
    return list(await asyncio.gather(*jobs))


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]
