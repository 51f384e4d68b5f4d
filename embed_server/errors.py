"""Failures the service raises, each carrying the HTTP status it means.

The core raises these without knowing about FastAPI; ``embed_server.api.app`` turns them
into ``{"detail": message}`` responses. Messages name the field and item at fault and
never carry stack traces or internal paths.
"""

from __future__ import annotations

import re

_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/[^\s'\"]+")


def redact_paths(message: str, allowed: set[str]) -> str:
    """Hide internal paths from error bodies; paths the caller sent may be echoed back."""
    return _ABSOLUTE_PATH.sub(
        lambda m: m.group(0) if m.group(0).rstrip(".,:;)") in allowed else "<path>", message
    )


class ServiceError(Exception):
    status_code = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequest(ServiceError):
    status_code = 400


class Unauthorized(ServiceError):
    status_code = 401


class PayloadTooLarge(ServiceError):
    status_code = 413


class ModelNotFound(ServiceError):
    """The model is unknown, not converted, or not loaded."""

    status_code = 404


class JobNotFound(ServiceError):
    status_code = 404


class ConversionFailed(ServiceError):
    status_code = 422


class TritonUnavailable(ServiceError):
    """Triton is down or restarting: worth retrying shortly."""

    status_code = 503
    retry_after_s = 1


class Overloaded(ServiceError):
    """Refused at once because too much work is in flight or queued: retry later."""

    status_code = 503
    retry_after_s = 1


class TooManyRequests(ServiceError):
    """Refused because a shared, costly resource (conversion slots) is all in use."""

    status_code = 429

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RestoreFailed(ServiceError):
    """A model meant to be loaded could not be restored after a restart: retrying will not
    help until an operator loads it again (or unloads it)."""

    status_code = 500


class DeadlineExceeded(ServiceError):
    status_code = 504


class TritonError(ServiceError):
    """Triton answered with an error that is not the caller's fault."""

    status_code = 502
