"""The Triton watcher survives its own failures, and a failed restore is reported as such."""

from __future__ import annotations

import asyncio

import pytest

from embed_server.errors import ModelNotFound, RestoreFailed, TritonUnavailable
from embed_server.loaded_set import LoadedSet
from embed_server.model_names import sentence_transformer_ref
from embed_server.recovery import TritonWatcher
from tests.unit.fakes import FakeTriton, inference_service


class FlakyModels:
    """Restores that fail ``failures`` times before they succeed."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def restore(self, default_models: list[str]) -> None:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError(28, "No space left on device")


async def _until(condition, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


def test_a_failing_cycle_is_logged_and_the_watcher_goes_on(caplog):
    models = FlakyModels(failures=1)
    watcher = TritonWatcher(FakeTriton(), models, [], interval_s=0.01)  # type: ignore[arg-type]

    async def run() -> None:
        task = asyncio.create_task(watcher.run())
        try:
            await _until(lambda: models.calls >= 2 or task.done())
            assert not task.done()
        finally:
            task.cancel()

    asyncio.run(run())
    assert models.calls == 2, "the failed restore is tried again"
    assert "Triton watcher cycle failed" in caplog.text


def test_the_watcher_is_restarted_whenever_its_loop_ends(monkeypatch):
    watcher = TritonWatcher(FakeTriton(), FlakyModels(0), [], interval_s=0.01)  # type: ignore[arg-type]
    runs = []

    async def run() -> None:
        runs.append(1)
        if len(runs) == 1:
            raise RuntimeError("a bug in the loop")
        if len(runs) == 2:
            return
        await asyncio.Event().wait()

    monkeypatch.setattr(watcher, "run", run)

    async def main() -> None:
        task = asyncio.create_task(watcher.run_forever())
        try:
            await _until(lambda: len(runs) >= 3)
            assert not task.done()
        finally:
            task.cancel()

    asyncio.run(main())


class HangingModels:
    """A restore stuck on a Triton that stopped answering; notes its cancellation."""

    def __init__(self) -> None:
        self.started = self.cancelled = False

    async def restore(self, default_models: list[str]) -> None:
        self.started = True
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


def test_a_restore_stuck_on_a_hung_triton_does_not_hide_the_hang():
    """Requests are refused at once only once the watcher has seen Triton stop answering;
    a restore in progress must not keep it from looking."""
    triton = FakeTriton()
    models = HangingModels()
    watcher = TritonWatcher(triton, models, [], interval_s=0.01)  # type: ignore[arg-type]

    async def run() -> None:
        task = asyncio.create_task(watcher.run())
        try:
            await _until(lambda: models.started)
            triton.live = False
            await _until(lambda: not triton.last_known_live, timeout_s=1.0)
            await _until(lambda: models.cancelled, timeout_s=1.0)
        finally:
            task.cancel()

    asyncio.run(run())


@pytest.fixture
def service(tmp_path):
    triton = FakeTriton()
    return inference_service(tmp_path, triton), LoadedSet(tmp_path), triton


async def _missing_in_triton():
    raise ModelNotFound("model 'x' is not loaded in Triton")


def test_a_model_whose_restore_failed_answers_500_with_the_reason(service):
    inference, loaded_set, _ = service
    ref = sentence_transformer_ref("org/m", [])
    loaded_set.mark_failed(ref.name, None, "OSError: No space left on device")
    with pytest.raises(RestoreFailed) as raised:
        asyncio.run(inference._guarded(ref, _missing_in_triton()))
    assert raised.value.status_code == 500
    assert raised.value.message == (
        "model_name: 'org/m' could not be restored: OSError: No space left on device; load it again"
    )


def test_a_model_being_restored_still_answers_503(service):
    inference, loaded_set, _ = service
    ref = sentence_transformer_ref("org/m", [])
    loaded_set.add(ref.name, None)
    with pytest.raises(TritonUnavailable):
        asyncio.run(inference._guarded(ref, _missing_in_triton()))
