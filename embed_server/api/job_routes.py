"""Routes of the background load jobs: start one, then poll it for its stage."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter, Request

from embed_server.api.access import Access, access
from embed_server.api.job_schemas import JobResponse, LoadJobRequest
from embed_server.api.schemas import ErrorResponse
from embed_server.errors import JobNotFound
from embed_server.jobs import STAGES, Job, LoadJobs

router = APIRouter(prefix="/jobs")
_ERRORS = {code: {"model": ErrorResponse} for code in (400, 404, 422)}


def _jobs(request: Request) -> LoadJobs:
    return request.app.state.jobs


def _response(job: Job) -> JobResponse:
    return JobResponse(**asdict(job), stages=list(STAGES))


@router.post(
    "/load",
    status_code=202,
    response_model=JobResponse,
    responses=_ERRORS,
    openapi_extra=access(Access.ADMIN),
)
async def start_load(body: LoadJobRequest, request: Request) -> JobResponse:
    ref = request.app.state.models.resolve(body.model_name, body.pretrained)
    return _response(_jobs(request).start(ref))


@router.get(
    "/{job_id}", response_model=JobResponse, responses=_ERRORS, openapi_extra=access(Access.ADMIN)
)
async def get_job(job_id: str, request: Request) -> JobResponse:
    job = _jobs(request).get(job_id)
    if job is None:
        raise JobNotFound(f"job_id: no job {job_id!r}")
    return _response(job)
