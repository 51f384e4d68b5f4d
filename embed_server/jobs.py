"""Background model loads that a client can follow: ``POST /jobs/load``, then poll the job.

Conversion takes minutes, too long for one HTTP request to show progress. A job runs
:meth:`ModelManager.load` as a task in the worker that accepted it and records each stage
the converter reports (download, export, verify, load) in a small JSON file under
``<model repository>/.jobs/``. Any worker can therefore answer ``GET /jobs/{id}``; only the
accepting worker runs the job, so a job whose worker stops is marked failed on shutdown
(or stays ``running`` if the worker was killed outright).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from embed_server.durable_file import replace_durably
from embed_server.errors import ServiceError
from embed_server.model_names import ModelRef
from embed_server.models import ModelManager

logger = logging.getLogger(__name__)

STAGES = ("download", "export", "verify", "load")
JobStatus = Literal["queued", "running", "succeeded", "failed"]
_JOB_ID = re.compile(r"^[0-9a-f]{32}$")
_KEEP_FINISHED_S = 24 * 3600.0


@dataclass
class Job:
    id: str
    model_name: str
    pretrained: str | None
    status: JobStatus = "queued"
    stage: str | None = None
    stages_done: list[str] = field(default_factory=list)
    message: str | None = None
    error: str | None = None
    error_status: int | None = None
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)


class JobStore:
    """Jobs as one JSON file each, replaced atomically and durably: readers, and a restart
    after a power loss, never see half a file."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def save(self, job: Job) -> None:
        job.updated = time.time()
        replace_durably(self._folder / f"{job.id}.json", json.dumps(asdict(job)).encode())

    def get(self, job_id: str) -> Job | None:
        if not _JOB_ID.match(job_id):
            return None
        path = self._folder / f"{job_id}.json"
        try:
            return Job(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as error:
            logger.error("job file %s is unreadable: %s", path.name, error)
            return None

    def prune(self, older_than_s: float = _KEEP_FINISHED_S) -> None:
        cutoff = time.time() - older_than_s
        for path in self._folder.glob("*.json"):
            try:
                expired = path.stat().st_mtime < cutoff
            except FileNotFoundError:
                # Pruned by another worker between the listing and now.
                continue
            if expired:
                path.unlink(missing_ok=True)


class LoadJobs:
    def __init__(self, store: JobStore, manager: ModelManager) -> None:
        self._store = store
        self._manager = manager
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, ref: ModelRef) -> Job:
        """Record a queued job and start loading; returns at once."""
        self._store.prune()
        job = Job(id=uuid.uuid4().hex, model_name=ref.name, pretrained=ref.pretrained)
        self._store.save(job)
        task = asyncio.create_task(self._run(job, ref))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def get(self, job_id: str) -> Job | None:
        return self._store.get(job_id)

    async def _run(self, job: Job, ref: ModelRef) -> None:
        def on_stage(stage: str) -> None:
            if job.stage is not None and job.stage not in job.stages_done:
                job.stages_done.append(job.stage)
            job.stage = stage
            self._store.save(job)

        job.status = "running"
        self._store.save(job)
        try:
            job.message = await self._manager.load(ref, on_stage=on_stage)
            if job.stage is not None:
                job.stages_done.append(job.stage)
            job.status = "succeeded"
        except ServiceError as error:
            job.status, job.error, job.error_status = "failed", error.message, error.status_code
        except asyncio.CancelledError:
            job.status, job.error = "failed", "the server stopped before the load finished"
            raise
        except Exception:
            logger.exception("load job %s failed", job.id)
            job.status, job.error = "failed", "internal server error"
        finally:
            self._store.save(job)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
