"""Wire types of the background load jobs (``/jobs``)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LoadJobRequest(BaseModel):
    """One body for both families: ``pretrained`` present means an OpenCLIP model."""

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(examples=["sentence-transformers/all-MiniLM-L6-v2"])
    pretrained: str | None = None


class JobResponse(BaseModel):
    id: str
    model_name: str
    pretrained: str | None
    status: str = Field(description="queued, running, succeeded or failed")
    stage: str | None = Field(description="download, export, verify or load")
    stages_done: list[str]
    stages: list[str] = Field(description="every stage a load from scratch goes through")
    message: str | None
    error: str | None
    error_status: int | None = Field(description="the HTTP status the synchronous call gives")
    created: float
    updated: float
