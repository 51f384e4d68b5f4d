"""Per-model locks: exclusive across instances (as across workers), and tidy on disk."""

from __future__ import annotations

import asyncio
import threading
import time

from embed_server.model_lock import ModelLocks


def test_the_lock_file_is_removed_on_release(tmp_path):
    locks = ModelLocks(tmp_path)

    async def use() -> None:
        for key in ("model_a", "model_b"):
            async with locks.hold(key):
                assert (tmp_path / f"{key}.lock").exists()

    asyncio.run(use())
    assert list(tmp_path.iterdir()) == []


def test_holders_exclude_each_other_while_lock_files_come_and_go(tmp_path):
    """Four 'workers' (own ModelLocks, own event loop) increment a counter file with a
    read-sleep-write window; a lost update would show the exclusion failed."""
    counter = tmp_path / "counter"
    counter.write_text("0")
    rounds, workers = 15, 4

    def worker() -> None:
        locks = ModelLocks(tmp_path / "locks")

        async def increments() -> None:
            for _ in range(rounds):
                async with locks.hold("model"):
                    value = int(counter.read_text())
                    time.sleep(0.002)
                    counter.write_text(str(value + 1))

        asyncio.run(increments())

    threads = [threading.Thread(target=worker) for _ in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert int(counter.read_text()) == rounds * workers
    assert list((tmp_path / "locks").iterdir()) == []


def test_try_hold_reports_a_lock_held_elsewhere_without_waiting(tmp_path):
    mine, other_worker = ModelLocks(tmp_path), ModelLocks(tmp_path)

    async def probe() -> tuple[bool, bool, bool]:
        async with other_worker.hold("model"):
            async with mine.try_hold("model") as across_workers:
                pass
        async with mine.hold("model"):
            async with mine.try_hold("model") as in_this_worker:
                pass
        async with mine.try_hold("model") as free:
            pass
        return across_workers, in_this_worker, free

    assert asyncio.run(asyncio.wait_for(probe(), 5)) == (False, False, True)
    assert list(tmp_path.iterdir()) == []


def test_a_cancelled_waiter_does_not_keep_the_lock(tmp_path):
    locks, other_worker = ModelLocks(tmp_path), ModelLocks(tmp_path)

    async def scenario() -> None:
        async with other_worker.hold("model"):
            waiter = asyncio.create_task(_hold_briefly(locks))
            await asyncio.sleep(0.1)
            waiter.cancel()
        await asyncio.sleep(0.2)  # the waiting thread gets the lock, then lets it go
        async with ModelLocks(tmp_path).try_hold("model") as held:
            assert held

    asyncio.run(asyncio.wait_for(scenario(), 5))


async def _hold_briefly(locks: ModelLocks) -> None:
    async with locks.hold("model"):
        pass
