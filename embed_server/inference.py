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
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from embed_server.errors import (
    BadRequest,
    DeadlineExceeded,
    ModelNotFound,
    PayloadTooLarge,
    RestoreFailed,
    TritonUnavailable,
)
from embed_server.image_fetch import ImageFetcher
from embed_server.inflight import InflightTracker
from embed_server.loaded_set import LoadedSet
from embed_server.model_names import ModelRef
from embed_server.observability.metrics import record_padding
from embed_server.preprocessing.clip_text import ClipTextTokenizer
from embed_server.preprocessing.image import ImageSpec, decode_and_prepare
from embed_server.preprocessing.text import TextPreprocessor
from embed_server.repository import ModelRepository
from embed_server.triton import TritonGateway

T = TypeVar("T")

# When the request being served must be answered (event-loop time): set by ``_guarded``,
# read by each Triton call in it, however deep in the request's tasks.
_DEADLINE: ContextVar[float | None] = ContextVar("deadline", default=None)

# Tokenising costs up to ~2.5 us per character and ~150 us per text on this project's
# 2-core machine (CLIP text full of emoji, where ftfy dominates). Up to this many cost
# units (characters plus _TEXT_COST per text, ~1-2 ms) a chunk is tokenised on the event
# loop, saving a thread hop on the common small request; anything more goes to the pool.
_INLINE_TOKENIZE_COST = 1_000
_TEXT_COST = 64
# A chunk holds at most this many characters (~50 ms of tokenising at worst) or one text,
# so a request past its deadline or disconnected drops the chunks it has not started.
_CHUNK_CHARS = 20_000


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
        text_pool: ThreadPoolExecutor,
        limits: RequestLimits,
        inflight: InflightTracker,
        loaded_set: LoadedSet,
        pad_to_multiple_of: int,
    ) -> None:
        self._repository = repository
        self._triton = triton
        self._fetcher = fetcher
        self._image_pool = image_pool
        self._text_pool = text_pool
        self._limits = limits
        self._inflight = inflight
        self._loaded_set = loaded_set
        self._pad_to_multiple_of = pad_to_multiple_of
        self._tokenizers: dict[str, tuple[dict[str, Any], Any]] = {}

    def _model(self, ref: ModelRef) -> dict[str, Any]:
        metadata = self._repository.metadata(ref.primary)
        if metadata is None:
            raise ModelNotFound(f"model_name: {ref.label!r} is not loaded")
        return metadata

    async def _tokenizer(self, ref: ModelRef, metadata: dict[str, Any]) -> Any:
        """The model's tokenizer, rebuilt whenever its metadata was re-read (re-converted).

        Reading a tokenizer.json (or building open_clip's BPE from its vocabulary) takes
        100-250 ms, so it happens in the text pool, not on the event loop.
        """
        cached = self._tokenizers.get(ref.primary)
        if cached is not None and cached[0] is metadata:
            return cached[1]
        folder = self._repository.path(ref.primary)
        loop = asyncio.get_running_loop()
        tokenizer = await loop.run_in_executor(
            self._text_pool, self._load_tokenizer, folder, metadata
        )
        self._tokenizers[ref.primary] = (metadata, tokenizer)
        return tokenizer

    def _load_tokenizer(self, folder: Path, metadata: dict[str, Any]) -> Any:
        if metadata["kind"] == "clip":
            return ClipTextTokenizer.from_model_dir(folder, metadata["text"])
        native = metadata.get("backend") == "onnxruntime"
        multiple = self._pad_to_multiple_of if native else 1
        return TextPreprocessor.from_model_dir(folder, metadata, multiple)

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
                async with asyncio.timeout(self._limits.deadline_s) as scope:
                    token = _DEADLINE.set(scope.when())
                    try:
                        return await work
                    finally:
                        _DEADLINE.reset(token)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"the request took longer than {self._limits.deadline_s:.0f} s"
                ) from None
            except ModelNotFound:
                failure = self._loaded_set.failure(ref.name, ref.pretrained)
                if failure is not None:
                    raise RestoreFailed(
                        f"model_name: {failure.label!r} could not be restored: "
                        f"{failure.reason}; load it again"
                    ) from None
                if self._loaded_set.contains(ref.name, ref.pretrained):
                    # Meant to be loaded: Triton restarted and the watcher is restoring it.
                    raise TritonUnavailable(
                        f"model_name: {ref.name!r} is being loaded again; retry shortly"
                    ) from None
                raise

    async def _infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: list[str]
    ) -> dict[str, np.ndarray]:
        """One Triton call, given what remains of the request's deadline: Triton then drops
        a request still queued when the API has given up on it, instead of running it."""
        deadline = _DEADLINE.get()
        remaining = (
            self._limits.deadline_s
            if deadline is None
            else deadline - asyncio.get_running_loop().time()
        )
        return await self._triton.infer(model, inputs, outputs, timeout_s=remaining)

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
        tokenizer = await self._tokenizer(ref, metadata)
        tokenizer.check_ids(rows, int(metadata.get("max_seq_length", 512)))
        return await self._guarded(ref, self._embed_ids(metadata, tokenizer, rows))

    async def _embed_ids(
        self, metadata: dict[str, Any], tokenizer: TextPreprocessor, rows: list[list[int]]
    ) -> Embeddings:
        model = metadata["triton_models"]["text"]

        async def run(piece: list[list[int]]) -> np.ndarray:
            batch = tokenizer.pad_ids(piece)
            feeds = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
            return (await self._infer(model, feeds, ["embedding"]))["embedding"]

        size = int(metadata.get("max_batch_size", 64))
        pieces = [rows[i : i + size] for i in range(0, len(rows), size)]
        outputs = await _all([run(piece) for piece in pieces])
        return Embeddings(np.concatenate(outputs), None, sum(len(row) for row in rows))

    async def _embed_texts(
        self, ref: ModelRef, metadata: dict[str, Any], texts: list[str], output: str
    ) -> tuple[np.ndarray, int]:
        tokenizer = await self._tokenizer(ref, metadata)
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

        # One chunk of this request in the pool at a time: concurrent requests take turns
        # there, and a cancelled request leaves nothing queued behind it.
        turn = asyncio.Lock()

        async def run(piece: list[str]) -> tuple[np.ndarray, int]:
            if sum(len(t) for t in piece) + _TEXT_COST * len(piece) <= _INLINE_TOKENIZE_COST:
                feeds, tokens = tokenize(piece)
            else:
                async with turn:
                    loop = asyncio.get_running_loop()
                    feeds, tokens = await loop.run_in_executor(self._text_pool, tokenize, piece)
            result = await self._infer(model, feeds, outputs)
            if reports_padding:
                counts = result["token_counts"]
                record_padding(ref.name, int(counts[:, 0].sum()), int(counts[:, 1].sum()))
            return result[output], tokens

        chunks = _text_chunks(texts, int(metadata.get("max_batch_size", 64)))
        results = await _all([run(chunk) for chunk in chunks])
        return np.concatenate([r[0] for r in results]), sum(r[1] for r in results)

    async def _embed_images(self, metadata: dict[str, Any], images: list[str]) -> np.ndarray:
        spec = ImageSpec.from_metadata(metadata["image"])
        loop = asyncio.get_running_loop()
        fetches = self._fetcher.for_request()

        async def load(index: int, source: str) -> np.ndarray:
            data = await fetches.fetch(index, source)
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
                self._infer(model, {"pixels": pixels[i : i + chunk]}, ["embedding"])
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


def _text_chunks(texts: list[str], size: int) -> list[list[str]]:
    """Consecutive texts, at most ``size`` and ``_CHUNK_CHARS`` characters (or one text)."""
    chunks: list[list[str]] = []
    chars = 0
    for text in texts:
        if not chunks or len(chunks[-1]) == size or chars + len(text) > _CHUNK_CHARS:
            chunks.append([])
            chars = 0
        chunks[-1].append(text)
        chars += len(text)
    return chunks
