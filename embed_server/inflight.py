"""Count the inference requests this worker has in flight, per model.

Eviction must never unload a model that is serving a request; Triton only sees requests
once they reach it, so the API counts them from the moment they are accepted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class InflightTracker:
    def __init__(self) -> None:
        self._by_model: Counter[str] = Counter()

    @contextmanager
    def track(self, model: str) -> Iterator[None]:
        self._by_model[model] += 1
        try:
            yield
        finally:
            self._by_model[model] -= 1
            if self._by_model[model] <= 0:
                del self._by_model[model]

    def busy(self, model: str) -> bool:
        return self._by_model.get(model, 0) > 0
