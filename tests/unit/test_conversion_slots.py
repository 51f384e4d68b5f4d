"""Concurrent conversions are bounded across workers; a refused one is a 429 with Retry-After.

Two ``ConversionSlots`` on one folder stand for two API workers (``flock`` belongs to the
open file, so they exclude each other as two processes do). The manager runs against a
fake Triton with a converter stand-in that waits until the test lets it finish.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from converters.layout import METADATA_FILE
from embed_server import models
from embed_server.conversion_slots import ConversionSlots
from embed_server.errors import TooManyRequests
from embed_server.inflight import InflightTracker
from embed_server.jobs import JobStore, LoadJobs
from embed_server.model_names import ModelRef, sentence_transformer_ref
from embed_server.models import ModelManager
from embed_server.repository import ModelRepository
from embed_server.settings import Settings
from tests.unit.fakes import FakeTriton, add_converted_model


def test_slots_are_shared_by_independent_holders_of_one_folder(tmp_path):
    worker_a, worker_b = ConversionSlots(tmp_path, 2), ConversionSlots(tmp_path, 2)
    with worker_a.hold(), worker_b.hold():
        with pytest.raises(TooManyRequests) as refused:
            with worker_a.hold():
                pass
        assert refused.value.status_code == 429
        assert refused.value.retry_after_s > 0
        assert refused.value.message.startswith(
            "conversion: 2 conversions are running (EMBED_MAX_CONVERSIONS=2); retry in "
        )
    with worker_b.hold():  # released slots are free again
        pass


def test_a_slot_is_released_when_the_conversion_fails(tmp_path):
    slots = ConversionSlots(tmp_path, 1)
    with pytest.raises(RuntimeError):
        with slots.hold():
            raise RuntimeError("converter crashed")
    with slots.hold():
        pass


class _Converter:
    """Stands in for ``run_converter``: writes the model once the test releases it."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = asyncio.Event()

    async def __call__(self, ref: ModelRef, out_dir: Path, *args: Any) -> dict[str, Any]:
        self.started.append(ref.name)
        await self.release.wait()
        folder = out_dir / ref.primary
        folder.mkdir()
        (folder / "config.pbtxt").write_text(f'name: "{ref.primary}"\n')
        metadata = {"model_name": ref.name, "triton_models": ref.triton_models}
        (folder / METADATA_FILE).write_text(json.dumps(metadata))
        return metadata


@pytest.fixture
def manager(tmp_path, monkeypatch) -> tuple[ModelManager, _Converter]:
    converter = _Converter()
    monkeypatch.setattr(models, "run_converter", converter)
    settings = Settings(model_repository=tmp_path, max_conversions=1, default_models=[])
    return ModelManager(settings, ModelRepository(tmp_path), FakeTriton(), InflightTracker()), (
        converter
    )


async def _until_started(converter: _Converter, count: int) -> None:
    while len(converter.started) < count:
        await asyncio.sleep(0.01)


def test_a_conversion_past_the_limit_is_refused_with_429(manager):
    manager, converter = manager
    first, second = sentence_transformer_ref("org/a", []), sentence_transformer_ref("org/b", [])

    async def run() -> None:
        running = asyncio.ensure_future(manager.load(first))
        await _until_started(converter, 1)
        with pytest.raises(TooManyRequests, match="EMBED_MAX_CONVERSIONS=1"):
            await asyncio.wait_for(manager.load(second), 5)
        converter.release.set()
        assert "loaded" in await running
        assert "loaded" in await manager.load(second)  # the slot is free again

    asyncio.run(run())
    assert converter.started == ["org/a", "org/b"]


def test_loads_of_the_model_being_converted_wait_for_it_instead_of_a_slot(manager):
    """The twins wait on the model's lock, then find it converted: one conversion, no 429."""
    manager, converter = manager
    ref = sentence_transformer_ref("org/a", [])

    async def run() -> list[str]:
        loads = [asyncio.ensure_future(manager.load(ref)) for _ in range(5)]
        await _until_started(converter, 1)
        await asyncio.sleep(0.1)
        converter.release.set()
        return await asyncio.wait_for(asyncio.gather(*loads), 5)

    messages = asyncio.run(run())
    assert converter.started == ["org/a"]
    assert all("loaded" in m for m in messages)


def test_a_converted_model_loads_while_every_slot_is_busy(manager, tmp_path):
    manager, converter = manager
    converting, converted = (
        sentence_transformer_ref("org/a", []),
        sentence_transformer_ref("org/done", []),
    )
    add_converted_model(tmp_path, converted.name, converted.primary)

    async def run() -> str:
        running = asyncio.ensure_future(manager.load(converting))
        await _until_started(converter, 1)
        try:
            return await asyncio.wait_for(manager.load(converted), 5)
        finally:
            converter.release.set()
            await running

    assert asyncio.run(run()) == "Model org/done loaded."


def test_a_load_job_refused_for_want_of_a_slot_reports_429(manager, tmp_path):
    manager, converter = manager
    jobs = LoadJobs(JobStore(tmp_path / ".jobs"), manager)

    async def run() -> Any:
        running = asyncio.ensure_future(manager.load(sentence_transformer_ref("org/a", [])))
        await _until_started(converter, 1)
        job = jobs.start(sentence_transformer_ref("org/b", []))
        for _ in range(500):
            recorded = jobs.get(job.id)
            if recorded is None or recorded.status not in ("queued", "running"):
                break
            await asyncio.sleep(0.01)
        converter.release.set()
        await running
        await jobs.close()
        return recorded

    job = asyncio.run(run())
    assert job.status == "failed"
    assert job.error_status == 429
    assert "EMBED_MAX_CONVERSIONS=1" in job.error
