"""Tokenising in a request: small work inline, the rest in the pool, dropped past the deadline.

The service runs against a fake Triton gateway and repository (the boundaries) with a real
open_clip BPE tokenizer, so the costs measured are the real ones.
"""

from __future__ import annotations

import asyncio
import random
import string
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import open_clip
import pytest

from embed_server.errors import DeadlineExceeded
from embed_server.inference import InferenceService, RequestLimits, _text_chunks
from embed_server.inflight import InflightTracker
from embed_server.loaded_set import LoadedSet
from embed_server.model_names import ModelRef
from embed_server.preprocessing.clip_bpe import build_tokenizer

WORD = "".join(random.Random(1).choices(string.ascii_lowercase, k=19_999))
REF = ModelRef(name="clip", kind="clip", triton_models={"text": "clip_text", "image": "clip_img"})


class _Repository:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        build_tokenizer(Path(open_clip.tokenizer.default_bpe())).save(str(folder / "tok.json"))
        self._metadata = {
            "kind": "clip",
            "triton_models": REF.triton_models,
            "max_batch_size": 64,
            "text": {
                "type": "clip_bpe",
                "tokenizer_file": "tok.json",
                "context_length": 77,
                "clean": "lower",
            },
        }

    def metadata(self, name: str) -> dict[str, Any] | None:
        return self._metadata

    def path(self, name: str) -> Path:
        return self.folder


class _Triton:
    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], timeout_s: float
    ) -> dict[str, np.ndarray]:
        return {"embedding": np.zeros((len(inputs["input_ids"]), 4), dtype=np.float32)}


def service(tmp_path: Path, deadline_s: float) -> InferenceService:
    limits = RequestLimits(
        max_items=512, max_text_chars=50_000, max_images=1, max_pixels=1, deadline_s=deadline_s
    )
    return InferenceService(
        _Repository(tmp_path),  # type: ignore[arg-type]
        _Triton(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        ThreadPoolExecutor(1),
        ThreadPoolExecutor(2),
        limits,
        InflightTracker(),
        LoadedSet(tmp_path),
        1,
    )


async def _longest_stall(work: Any) -> tuple[Any, float]:
    """Run ``work`` while a ticker measures the longest time the event loop was blocked."""
    stalls = [0.0]

    async def tick() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - before - 0.001)

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.01)
    try:
        result = await work
        await asyncio.sleep(0.01)  # the ticker records a stall when it runs again
        return result, max(stalls)
    finally:
        ticker.cancel()


@pytest.mark.parametrize(
    "texts",
    [
        [WORD],
        ["a photo of a cat " * 50] * 20,
        ["short text"] * 64,
        [WORD, "\U0001f600\u00e9" * 1_000, *(["short text"] * 20)],
    ],
    ids=["19999-char-word", "20-texts-of-850-chars", "64-short-texts", "mixed"],
)
def test_tokenising_never_blocks_the_event_loop(tmp_path, texts):
    """The old code tokenised up to 20,000 characters on the loop: a 19,999-character word
    blocked it for 11-26 s."""
    served = service(tmp_path, 30)

    async def measure() -> tuple[Any, float]:
        # Loading tokenizer.json holds the GIL (~150 ms), once per model: not measured here.
        await served.embed(REF, ["warm up"], None, None)
        return await _longest_stall(served.embed(REF, texts, None, None))

    embeddings, stall = asyncio.run(measure())
    assert embeddings.text.shape == (len(texts), 4)
    assert stall < 0.05, stall


def test_a_request_past_its_deadline_stops_tokenising(tmp_path):
    """The chunks not started when the deadline passes never run: the CPU goes quiet."""
    texts = ["\U0001f600\u00e9" * 25_000] * 200  # ~50 ms of cleaning each, ~10 s in all

    async def expire_then_measure_cpu() -> float:
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            await service(tmp_path, 0.5).embed(REF, texts, None, None)
        assert time.monotonic() - started < 1.5
        await asyncio.sleep(0.3)  # the chunk running at the deadline finishes
        cpu_before = time.process_time()
        await asyncio.sleep(1.0)
        return time.process_time() - cpu_before

    assert asyncio.run(expire_then_measure_cpu()) < 0.25


def test_chunks_are_bounded_by_count_and_characters():
    texts = ["a" * 15_000, "b" * 15_000, "c" * 60_000, "d", "e", "f"]
    chunks = _text_chunks(texts, size=2)
    assert chunks == [["a" * 15_000], ["b" * 15_000], ["c" * 60_000], ["d", "e"], ["f"]]
