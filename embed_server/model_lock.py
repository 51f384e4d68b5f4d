"""Serialise load, unload and delete of one model across coroutines and API workers.

An ``asyncio.Lock`` orders coroutines in this process; an ``flock`` on a file in the model
repository orders processes, so several ``uvicorn`` workers never convert a model twice or
delete it under a load.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path


class ModelLocks:
    def __init__(self, lock_dir: Path) -> None:
        self._dir = lock_dir
        self._dir.mkdir(parents=True, exist_ok=True)
        self._local: dict[str, asyncio.Lock] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        local = self._local.setdefault(key, asyncio.Lock())
        async with local:
            fd = os.open(self._dir / f"{key}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)
