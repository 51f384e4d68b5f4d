"""Watch Triton and restore the intended models whenever it (re)appears.

Runs in every API worker: at start-up, and each time Triton comes back after a crash or
restart, the default models and the persisted loaded set are loaded again, with no manual
step. Per-model locks make concurrent restores by several workers load each model once.
"""

from __future__ import annotations

import asyncio
import logging

from embed_server.models import ModelManager
from embed_server.triton import TritonGateway

logger = logging.getLogger(__name__)


class TritonWatcher:
    def __init__(
        self,
        triton: TritonGateway,
        models: ModelManager,
        default_models: list[str],
        interval_s: float = 0.5,
    ) -> None:
        self._triton = triton
        self._models = models
        self._defaults = default_models
        self._interval_s = interval_s

    async def run(self) -> None:
        """Restore on each start of Triton. Liveness, not readiness, marks a start: with
        strict readiness Triton reports not-ready while any model loads, and treating that
        as an outage would start a restore in the middle of someone's load."""
        was_live = False
        while True:
            live = await self._triton.is_live()
            ready = live and await self._triton.is_ready()
            self._triton.last_known_ready = ready
            self._triton.last_known_live = live
            if live and not was_live:
                logger.info("Triton is up; restoring models")
                await self._models.restore(self._defaults)
            elif was_live and not live:
                logger.warning("Triton is down; inference answers 503 until it returns")
            was_live = live
            await asyncio.sleep(self._interval_s)
