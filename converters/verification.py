"""The check every converter runs before a model may enter the repository."""

from __future__ import annotations

import numpy as np


def worst_cosine(got: np.ndarray, want: np.ndarray) -> float:
    """Smallest row-wise cosine similarity between exported and reference embeddings."""
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1)
    return float(((got * want).sum(1) / norms).min())
