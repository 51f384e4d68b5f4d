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
        self.restoring = False

    async def run(self) -> None:
        was_ready = False
        while True:
            ready = await self._triton.is_ready()
            self._triton.last_known_ready = ready
            if ready and not was_ready:
                logger.info("Triton is ready; restoring models")
                self.restoring = True
                try:
                    await self._models.restore(self._defaults)
                finally:
                    self.restoring = False
            elif was_ready and not ready:
                logger.warning("Triton is not ready; inference answers 503 until it returns")
            was_ready = ready
            await asyncio.sleep(self._interval_s)
