"""Watch Triton and restore the intended models whenever it (re)appears.

Runs in every API worker: at start-up, and each time Triton comes back after a crash or
restart, the default models and the persisted loaded set are loaded again, with no manual
step. Per-model locks make concurrent restores by several workers load each model once.

Nothing may stop the watcher: without it a restarted Triton is never given its models
back. A cycle that fails is logged and retried after a back-off, and ``run_forever``
restarts the loop itself should it ever end.
"""

from __future__ import annotations

import asyncio
import logging

from embed_server.models import ModelManager
from embed_server.triton import TritonGateway

logger = logging.getLogger(__name__)

# Longest pause after failed cycles in a row (full disk, unreadable state): long enough
# not to flood the log, short enough that recovery follows soon after the cause is fixed.
_MAX_BACKOFF_S = 10.0


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

    async def run_forever(self) -> None:
        """``run``, restarted whenever it ends (it is not meant to)."""
        while True:
            try:
                await self.run()
                logger.error("the Triton watcher stopped; restarting it")
            except Exception:
                logger.exception("the Triton watcher failed; restarting it")
            await asyncio.sleep(self._interval_s)

    async def run(self) -> None:
        """Restore on each start of Triton. Liveness, not readiness, marks a start: with
        strict readiness Triton reports not-ready while any model loads, and treating that
        as an outage would start a restore in the middle of someone's load.

        A restore that fails as a whole is tried again on the next cycle: Triton counts as
        seen only once its restore went through.
        """
        was_live = False
        backoff_s = self._interval_s
        while True:
            try:
                was_live = await self._cycle(was_live)
                backoff_s = self._interval_s
            except Exception:
                backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)
                logger.exception("Triton watcher cycle failed; retrying in %.1f s", backoff_s)
            await asyncio.sleep(backoff_s)

    async def _cycle(self, was_live: bool) -> bool:
        """One look at Triton; returns whether it is live (and restored)."""
        live = await self._triton.is_live()
        ready = live and await self._triton.is_ready()
        self._triton.last_known_ready = ready
        self._triton.last_known_live = live
        if live and not was_live:
            logger.info("Triton is up; restoring models")
            await self._models.restore(self._defaults)
        elif was_live and not live:
            logger.warning("Triton is down; inference answers 503 until it returns")
        return live
