"""ModelManager against a fake Triton gateway: eviction under locks, restore failures."""

from __future__ import annotations

import asyncio

import pytest

from embed_server.errors import Overloaded, TritonError
from embed_server.inflight import InflightTracker
from embed_server.model_lock import ModelLocks
from embed_server.model_names import sentence_transformer_ref
from embed_server.models import ModelManager
from embed_server.repository import ModelRepository
from embed_server.settings import Settings
from tests.unit.fakes import FakeTriton, add_converted_model


@pytest.fixture
def setup(tmp_path):
    """A repository holding models ``org/old`` (loaded) and ``org/new`` (converted, not
    loaded), a limit of one loaded model, and a manager over a fake Triton."""
    old = sentence_transformer_ref("org/old", [])
    new = sentence_transformer_ref("org/new", [])
    for ref in (old, new):
        add_converted_model(tmp_path, ref.name, ref.primary)
    triton = FakeTriton(ready={old.primary})
    settings = Settings(model_repository=tmp_path, max_loaded_models=1, default_models=[])
    manager = ModelManager(settings, ModelRepository(tmp_path), triton, InflightTracker())
    manager.loaded_set.add(old.name, None)
    return manager, triton, old, new, tmp_path


def test_eviction_unloads_the_least_recently_used_model_under_its_lock(setup):
    manager, triton, old, new, _ = setup
    message = asyncio.run(manager.load(new))
    assert "Unloaded org/old" in message
    assert ("unload", old.primary) in triton.calls
    assert not manager.loaded_set.contains(old.name, None)


def test_eviction_passes_over_a_model_whose_lock_another_worker_holds(setup):
    manager, triton, old, new, root = setup
    other_worker = ModelLocks(root / ".locks")

    async def load_while_old_is_held() -> None:
        async with other_worker.hold(old.primary):
            await manager.load(new)

    with pytest.raises(Overloaded):
        asyncio.run(load_while_old_is_held())
    assert ("unload", old.primary) not in triton.calls
    assert manager.loaded_set.contains(old.name, None)


def test_two_loads_evicting_each_other_do_not_deadlock(tmp_path):
    """Two models half loaded in Triton and a limit of one: each load holds its own
    model's lock and would evict the other. Neither may wait for the other's lock."""
    a, b = sentence_transformer_ref("org/a", []), sentence_transformer_ref("org/b", [])
    for ref in (a, b):
        add_converted_model(tmp_path, ref.name, ref.primary)
    triton = FakeTriton(ready={a.primary, b.primary})
    settings = Settings(model_repository=tmp_path, max_loaded_models=1, default_models=[])
    manager = ModelManager(settings, ModelRepository(tmp_path), triton, InflightTracker())

    async def not_ready(model: str) -> bool:
        return False

    async def slow_listing() -> set[str]:
        await asyncio.sleep(0.2)  # both loads hold their own lock by now
        return {a.primary, b.primary}

    triton.is_model_ready = not_ready  # type: ignore[method-assign]
    triton.ready_models = slow_listing  # type: ignore[method-assign]

    async def both() -> list[object]:
        loads = asyncio.gather(manager.load(a), manager.load(b), return_exceptions=True)
        return await asyncio.wait_for(loads, 5)

    results = asyncio.run(both())  # a deadlock would raise TimeoutError here
    assert Overloaded in {type(r) for r in results}
    assert all(isinstance(r, (str, Overloaded)) for r in results), results


def test_a_restore_failure_is_recorded_and_the_other_models_are_restored(setup, monkeypatch):
    manager, _, old, new, _ = setup
    manager.loaded_set.add(new.name, None)
    restored = []

    async def load(ref, on_stage=None):
        if ref.name == old.name:
            raise OSError(28, "No space left on device", "/srv/secret/model_repository")
        restored.append(ref.name)
        return "loaded"

    monkeypatch.setattr(manager, "load", load)
    asyncio.run(manager.restore([]))
    assert restored == [new.name]
    failure = manager.loaded_set.failure(old.name, None)
    assert failure is not None
    assert failure.reason == "OSError: No space left on device"
    assert manager.loaded_set.failure(new.name, None) is None


def test_a_later_load_clears_a_restore_failure(setup):
    manager, _, _, new, _ = setup
    manager.loaded_set.mark_failed(new.name, None, "converter crashed")
    asyncio.run(manager.load(new))
    assert manager.loaded_set.failure(new.name, None) is None
    assert manager.loaded_set.contains(new.name, None)


def test_a_restore_failure_reason_shows_no_internal_path_or_stack(setup, monkeypatch):
    manager, _, old, _, _ = setup

    async def load(ref, on_stage=None):
        raise TritonError(
            "Triton could not load 'x': load failed for model '/srv/repo/x/1/model.onnx': "
            "Protobuf parsing failed.\n\nAt:\n  /venv/onnxruntime/session.py(778): create\n"
        )

    monkeypatch.setattr(manager, "load", load)
    asyncio.run(manager.restore([]))
    failure = manager.loaded_set.failure(old.name, None)
    assert failure is not None
    assert failure.reason == (
        "Triton could not load 'x': load failed for model '<path>': Protobuf parsing failed."
    )
