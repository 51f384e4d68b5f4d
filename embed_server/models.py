"""Model lifecycle: convert into the repository, load, unload, delete, list.

State lives in the model repository and in Triton, never in this object, so any number of
API workers can share them; per-model locks (``ModelLocks``) order concurrent changes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from converters.triton_config import DeploymentOptions
from embed_server.conversion import run_converter
from embed_server.conversion_slots import ConversionSlots
from embed_server.errors import ModelNotFound, Overloaded, ServiceError, redact_paths
from embed_server.inflight import InflightTracker
from embed_server.loaded_set import LoadedSet
from embed_server.model_lock import ModelLocks
from embed_server.model_names import (
    HF_HUB_PREFIX,
    ModelRef,
    clip_ref,
    model_label,
    sentence_transformer_ref,
)
from embed_server.observability.metrics import CONVERSIONS
from embed_server.repository import ModelRepository
from embed_server.settings import Settings
from embed_server.statistics import model_stats
from embed_server.triton import TritonGateway

logger = logging.getLogger(__name__)


def deployment_options(settings: Settings) -> DeploymentOptions:
    return DeploymentOptions(
        backend=settings.resolved_backend(),
        max_batch_size=settings.max_batch_size,
        max_queue_delay_us=settings.max_queue_delay_us,
        instance_count=settings.resolved_instance_count(),
        instance_kind=settings.resolved_instance_kind(),
        intra_op_threads=settings.ort_intra_op_threads,
        single_text_spinning=settings.ort_single_text_spinning,
        padding_efficiency=settings.padding_efficiency,
        warmup=settings.warmup,
        max_queue_size=settings.triton_max_queue_size,
        queue_timeout_us=int(settings.request_timeout_s * 1_000_000),
        max_download_bytes=settings.max_download_bytes,
    )


# Longest restore failure reason kept and shown; Triton's can run to a page.
_MAX_REASON_CHARS = 300
# A model that served a request this recently may still have one in flight in another
# worker; eviction passes over it.
_RECENT_USE_S = 5.0


class ModelManager:
    def __init__(
        self,
        settings: Settings,
        repository: ModelRepository,
        triton: TritonGateway,
        inflight: InflightTracker,
    ) -> None:
        self._settings = settings
        self._repository = repository
        self._triton = triton
        self._inflight = inflight
        self._locks = ModelLocks(repository.root / ".locks")
        self._conversion_slots = ConversionSlots(
            repository.root / ".locks" / "conversions", settings.max_conversions
        )
        self.loaded_set = LoadedSet(repository.root)

    def resolve(self, model_name: str, pretrained: str | None = None) -> ModelRef:
        """Validate a request's model fields and name the Triton models behind them.

        A ``pretrained`` field or an ``hf-hub:`` name means an OpenCLIP model; otherwise a
        sentence-transformer.
        """
        if pretrained is not None or model_name.startswith(HF_HUB_PREFIX):
            return self.resolve_clip(model_name, pretrained)
        return sentence_transformer_ref(model_name, self._settings.local_model_dirs)

    def resolve_clip(self, model_name: str, pretrained: str | None) -> ModelRef:
        return clip_ref(model_name, pretrained, self._settings.local_model_dirs)

    async def load(self, ref: ModelRef, on_stage: Callable[[str], None] | None = None) -> str:
        """Convert ``ref`` if the repository lacks it, then load it; returns a message."""
        async with self._locks.hold(ref.primary):
            names = list(ref.triton_models.values())
            if self._repository.is_complete(ref.primary):
                ready = [await self._triton.is_model_ready(n) for n in names]
                if all(ready):
                    self.loaded_set.add(ref.name, ref.pretrained)
                    return f"Model {ref.label} is already loaded."
            else:
                await self._convert(ref, on_stage)
            evicted = await self._make_room(ref)
            if on_stage is not None:
                on_stage("load")
            started = time.perf_counter()
            for name in names:
                await self._triton.load(name, self._settings.conversion_timeout_s)
            self.loaded_set.add(ref.name, ref.pretrained)
            logger.info("loaded %s in %.1f s", ref.label, time.perf_counter() - started)
            message = f"Model {ref.label} loaded."
            if evicted:
                message += (
                    f" Unloaded {', '.join(evicted)} to stay within "
                    f"EMBED_MAX_LOADED_MODELS={self._settings.max_loaded_models}."
                )
            return message

    async def _make_room(self, incoming: ModelRef) -> list[str]:
        """Unload least recently used models until ``incoming`` fits the configured limit.

        Triton's per-model ``last_inference`` time is the shared truth across workers;
        models with requests in flight here, or used in the last seconds, are passed over.
        """
        limit = self._settings.max_loaded_models
        if limit <= 0:
            return []
        loaded = [
            m for m in await self._loaded_metadata() if m["triton_models"] != incoming.triton_models
        ]
        if len(loaded) < limit:
            return []
        last_used = {
            s["name"]: s["last_inference"] for s in model_stats(await self._triton.statistics())
        }
        now_ms = time.time() * 1000

        def last_inference(meta: dict[str, Any]) -> int:
            return max(last_used.get(n, 0) for n in meta["triton_models"].values())

        candidates = [
            meta
            for meta in loaded
            if not self._inflight.busy(meta["triton_models"]["text"])
            and now_ms - last_inference(meta) > _RECENT_USE_S * 1000
        ]
        candidates.sort(key=last_inference)
        needed = len(loaded) - limit + 1
        all_busy = Overloaded(
            f"model_name: all {len(loaded)} loaded models are in use "
            f"(EMBED_MAX_LOADED_MODELS={limit}); retry shortly"
        )
        if needed > len(candidates):
            raise all_busy
        evicted: list[str] = []
        for meta in candidates:
            if len(evicted) == needed:
                break
            # A model whose lock is taken is being loaded, unloaded or deleted: not a
            # victim. Never wait for it: that load may be evicting this one's model.
            async with self._locks.try_hold(meta["triton_models"]["text"]) as held:
                if not held:
                    continue
                for name in meta["triton_models"].values():
                    await self._triton.unload(name)
                self.loaded_set.remove(meta["model_name"], meta.get("pretrained"))
            label = model_label(meta["model_name"], meta.get("pretrained"))
            logger.info("evicted %s (least recently used)", label)
            evicted.append(label)
        if len(evicted) < needed:
            raise all_busy
        return evicted

    async def _convert(self, ref: ModelRef, on_stage: Callable[[str], None] | None) -> None:
        """Convert ``ref`` into the repository, holding one of the shared conversion slots.

        Called under the model's lock, so concurrent loads of the same model wait for that
        lock (and then find the model converted) instead of taking a slot of their own.
        """
        with self._conversion_slots.hold():
            staging = self._repository.new_staging_dir()
            started = time.perf_counter()
            outcome = "failed"
            try:
                await run_converter(
                    ref,
                    staging,
                    deployment_options(self._settings),
                    self._settings.conversion_timeout_s,
                    on_stage,
                )
                self._repository.commit(staging, ref.primary)
                outcome = "converted"
            finally:
                self._repository.discard(staging)
                CONVERSIONS.labels(ref.kind, outcome).observe(time.perf_counter() - started)
        logger.info("converted %s in %.1f s", ref.label, time.perf_counter() - started)

    async def unload(self, ref: ModelRef) -> str:
        async with self._locks.hold(ref.primary):
            ready = [n for n in ref.triton_models.values() if await self._triton.is_model_ready(n)]
            if not ready:
                raise ModelNotFound(f"model_name: {ref.label!r} is not loaded")
            for name in ready:
                await self._triton.unload(name)
            self.loaded_set.remove(ref.name, ref.pretrained)
            return f"Model {ref.label} unloaded."

    async def delete(self, ref: ModelRef) -> str:
        async with self._locks.hold(ref.primary):
            names = list(ref.triton_models.values())
            ready = [n for n in names if await self._triton.is_model_ready(n)]
            in_repository = any(self._repository.path(n).is_dir() for n in names)
            if not in_repository and not ready:
                raise ModelNotFound(f"model_name: {ref.label!r} is not in the model repository")
            for name in ready:
                await self._triton.unload(name)
            self.loaded_set.remove(ref.name, ref.pretrained)
            self._repository.delete(names, ref.primary)
            return f"Model {ref.label} deleted."

    async def _loaded_metadata(self) -> list[dict[str, Any]]:
        ready = await self._triton.ready_models()
        return [
            meta
            for meta in self._repository.list_models()
            if set(meta["triton_models"].values()) <= ready
        ]

    async def loaded_models(self) -> list[dict[str, Any]]:
        return [_summary(meta) for meta in await self._loaded_metadata()]

    async def restore(self, default_models: list[str]) -> None:
        """Load the default models and every model the persisted set says was loaded.

        Any failure (a refused name, a full disk, a converter crash) is recorded in the
        loaded set for that model alone, so the others are still restored and the failed
        one is reported with its reason until it is loaded again.
        """
        wanted = [{"model_name": name, "pretrained": None} for name in default_models]
        wanted += [e for e in self.loaded_set.entries() if e not in wanted]
        for entry in wanted:
            name, pretrained = str(entry["model_name"]), entry.get("pretrained")
            try:
                ref = self.resolve(name, pretrained)
                logger.info("restoring %s", name)
                logger.info(await self.load(ref))
            except Exception as error:
                reason = _restore_reason(error, {name, pretrained or ""})
                trace = None if isinstance(error, ServiceError) else error
                logger.error("could not restore %s: %s", name, reason, exc_info=trace)
                self.loaded_set.mark_failed(name, pretrained, reason)

    async def repository_models(self) -> list[dict[str, Any]]:
        ready = await self._triton.ready_models()
        return [
            {**_summary(meta), "loaded": set(meta["triton_models"].values()) <= ready}
            for meta in self._repository.list_models()
        ]


def _restore_reason(error: Exception, given: set[str]) -> str:
    """Why a restore failed, fit for a response body: one line, no internal paths (Triton's
    load errors carry the model's path and a Python stack)."""
    if isinstance(error, ServiceError):
        # Drop the field prefix ("model_name: "): the caller's message names the model.
        first_line = error.message.removeprefix("model_name: ").split("\n", 1)[0]
        return redact_paths(first_line[:_MAX_REASON_CHARS], given)
    if isinstance(error, OSError) and error.strerror:
        return f"{type(error).__name__}: {error.strerror}"
    return f"{type(error).__name__} (see the server log)"


def _summary(meta: dict[str, Any]) -> dict[str, Any]:
    keys = ("model_name", "pretrained", "kind", "triton_models", "embedding_dim", "max_seq_length")
    return {k: meta[k] for k in keys if k in meta}
