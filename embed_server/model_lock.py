"""Serialise load, unload and delete of one model across coroutines and API workers.

An ``asyncio.Lock`` orders coroutines in this process; an ``flock`` on a file in the model
repository orders processes, so several ``uvicorn`` workers never convert a model twice or
delete it under a load.

The lock file is removed on release, so names used once leave nothing behind. A waiter may
then hold the lock of a file that is no longer in the folder; it notices (the inode at the
path is not the one it locked) and starts over on the file now there. Only the holder
removes the file, so the file at the path is always the one that counts.
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
        """Wait for the model's lock and hold it for the block."""
        async with self._local.setdefault(key, asyncio.Lock()):
            future = asyncio.get_running_loop().run_in_executor(None, self._lock_file, key, True)
            try:
                fd = await asyncio.shield(future)
            except asyncio.CancelledError:
                # The thread still waits for the flock: release it as soon as it has it.
                future.add_done_callback(lambda done: self._release_done(key, done))
                raise
            assert fd is not None
            try:
                yield
            finally:
                self._unlock_file(key, fd)

    @asynccontextmanager
    async def try_hold(self, key: str) -> AsyncIterator[bool]:
        """Hold the model's lock for the block if it is free now; yields whether it is held.

        For a caller that already holds another model's lock (eviction during a load):
        waiting there could deadlock with a load that evicts the other way round.
        """
        local = self._local.setdefault(key, asyncio.Lock())
        if local.locked():
            yield False
            return
        async with local:
            fd = self._lock_file(key, blocking=False)
            if fd is None:
                yield False
                return
            try:
                yield True
            finally:
                self._unlock_file(key, fd)

    def _path(self, key: str) -> Path:
        return self._dir / f"{key}.lock"

    def _lock_file(self, key: str, blocking: bool) -> int | None:
        """A descriptor holding the flock of the file now at the key's path; None when
        not ``blocking`` and another holder has it."""
        path = self._path(key)
        while True:
            fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
                locked = os.fstat(fd)
                current = os.stat(path)
            except BlockingIOError:
                os.close(fd)
                return None
            except FileNotFoundError:
                # Removed by the holder we waited for: start over on a new file.
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            if (locked.st_dev, locked.st_ino) == (current.st_dev, current.st_ino):
                return fd
            os.close(fd)

    def _unlock_file(self, key: str, fd: int) -> None:
        try:
            self._path(key).unlink(missing_ok=True)
        finally:
            os.close(fd)

    def _release_done(self, key: str, done: asyncio.Future[int | None]) -> None:
        if not done.cancelled() and done.exception() is None and done.result() is not None:
            self._unlock_file(key, done.result())
