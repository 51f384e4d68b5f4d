"""A stand-in for ``TritonGateway`` for service-layer unit tests: it keeps a set of ready
models and records every call, so a test can stage Triton's state and check what the
service asked of it."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from converters.layout import METADATA_FILE
from embed_server.image_fetch import ImageFetcher
from embed_server.inference import InferenceService, RequestLimits
from embed_server.inflight import InflightTracker
from embed_server.loaded_set import LoadedSet
from embed_server.repository import ModelRepository


class FakeTriton:
    def __init__(self, ready: set[str] | None = None) -> None:
        self.ready = set(ready or ())
        self.calls: list[tuple[Any, ...]] = []
        self.live = True
        self.last_known_live = True
        self.last_known_ready = True

    async def is_live(self) -> bool:
        return self.live

    async def is_ready(self) -> bool:
        return self.live

    async def is_model_ready(self, model: str) -> bool:
        return model in self.ready

    async def ready_models(self) -> set[str]:
        return set(self.ready)

    async def statistics(self) -> list[dict[str, Any]]:
        return [{"name": name, "last_inference": 0} for name in self.ready]

    async def load(self, model: str, timeout_s: float) -> None:
        self.calls.append(("load", model))
        self.ready.add(model)

    async def unload(self, model: str) -> None:
        self.calls.append(("unload", model))
        self.ready.discard(model)

    async def infer(
        self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], timeout_s: float
    ) -> dict[str, np.ndarray]:
        self.calls.append(("infer", model, timeout_s))
        return {name: np.zeros((1, 4), np.float32) for name in outputs}


def add_converted_model(
    repository_root: Path, model_name: str, triton_name: str, **metadata: Any
) -> None:
    """A model folder the repository counts as complete (no real weights); ``metadata``
    adds to or replaces the sentence-transformer defaults (a CLIP model's, say)."""
    folder = repository_root / triton_name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(f'name: "{triton_name}"\n')
    metadata = {
        "kind": "sentence_transformer",
        "model_name": model_name,
        "triton_models": {"text": triton_name},
        **metadata,
    }
    (folder / METADATA_FILE).write_text(json.dumps(metadata))


def inference_service(
    repository_root: Path,
    triton: FakeTriton,
    deadline_s: float = 5.0,
    fetcher: ImageFetcher | None = None,
    limits: RequestLimits | None = None,
) -> InferenceService:
    """An InferenceService over the fake gateway; images only with a real ``fetcher``."""
    limits = limits or RequestLimits(
        max_items=8, max_text_chars=100, max_images=8, max_pixels=100, deadline_s=deadline_s
    )
    return InferenceService(
        repository=ModelRepository(repository_root),
        triton=triton,  # type: ignore[arg-type]
        fetcher=fetcher,  # type: ignore[arg-type]
        image_pool=ThreadPoolExecutor(2) if fetcher else None,  # type: ignore[arg-type]
        text_pool=None,  # type: ignore[arg-type]
        limits=limits,
        inflight=InflightTracker(),
        loaded_set=LoadedSet(repository_root),
        pad_to_multiple_of=1,
    )
