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

        The restore runs beside the polling, never inside it: a restore waiting on a Triton
        that hangs must not stop this loop from seeing the hang (requests are refused at
        once only after it is seen). A restore whose Triton goes away is cancelled; one
        that fails as a whole is tried again after a back-off.
        """
        was_live = False
        restore: asyncio.Task[None] | None = None
        retry_at: float | None = None
        backoff_s = self._interval_s
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    live = await self._poll()
                    if not live:
                        if was_live:
                            logger.warning("Triton is down; inference answers 503 until it returns")
                        _cancel(restore)
                        restore = retry_at = None
                    elif not was_live:
                        logger.info("Triton is up; restoring models")
                        restore, backoff_s = self._start_restore(restore), self._interval_s
                    elif _failed(restore) and retry_at is None:
                        backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)
                        retry_at = loop.time() + backoff_s
                        logger.error(
                            "Triton watcher cycle failed: restoring models raised %r; "
                            "retrying in %.1f s",
                            restore.exception() if restore is not None else None,
                            backoff_s,
                        )
                    elif retry_at is not None and loop.time() >= retry_at:
                        restore, retry_at = self._start_restore(restore), None
                    was_live = live
                except Exception:
                    logger.exception("Triton watcher cycle failed; going on")
                await asyncio.sleep(self._interval_s)
        finally:
            _cancel(restore)

    async def _poll(self) -> bool:
        """Whether Triton is live now; what /health and the fast 503s read."""
        live = await self._triton.is_live()
        ready = live and await self._triton.is_ready()
        self._triton.last_known_ready = ready
        self._triton.last_known_live = live
        return live

    def _start_restore(self, previous: asyncio.Task[None] | None) -> asyncio.Task[None]:
        _cancel(previous)
        return asyncio.create_task(self._models.restore(self._defaults))


def _cancel(task: asyncio.Task[None] | None) -> None:
    if task is not None and not task.done():
        task.cancel()


def _failed(task: asyncio.Task[None] | None) -> bool:
    return (
        task is not None and task.done() and not task.cancelled() and task.exception() is not None
    )
