"""At most N conversions at once across every API worker sharing the model repository.

Each conversion is a torch process of gigabytes; 50 load jobs once started 50 of them. The
bound must hold across uvicorn workers, so it lives in the repository as N slot files,
``<repository>/.locks/conversions/<i>.slot``: a conversion holds one with a non-blocking
``flock`` for as long as it runs. The kernel drops the lock when its holder exits, so a
killed worker frees its slot, and the files themselves never change (no stale state).

Refusing beats queueing here: a queued conversion would hold its HTTP request or job for
many minutes with no bound on how many wait, while a 429 with Retry-After tells the client
when to come back.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from embed_server.errors import TooManyRequests

# Conversions take from seconds to minutes; this is how soon a refused client tries again.
RETRY_AFTER_S = 30


class ConversionSlots:
    def __init__(self, folder: Path, count: int) -> None:
        self._folder = folder
        self._count = count

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Hold a free slot for the block, or raise :class:`TooManyRequests` at once.

        ``flock`` belongs to the open file, so two holders in one process exclude each
        other just as two workers do; taking it never blocks, so this may run on the loop.
        """
        fd = self._take_free_slot()
        if fd is None:
            raise TooManyRequests(
                f"conversion: {self._count} conversions are running "
                f"(EMBED_MAX_CONVERSIONS={self._count}); retry in {RETRY_AFTER_S} s",
                retry_after_s=RETRY_AFTER_S,
            )
        try:
            yield
        finally:
            os.close(fd)  # closing the last descriptor of the open file releases the flock

    def _take_free_slot(self) -> int | None:
        self._folder.mkdir(parents=True, exist_ok=True)
        for index in range(self._count):
            fd = os.open(self._folder / f"{index}.slot", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            return fd
        return None
