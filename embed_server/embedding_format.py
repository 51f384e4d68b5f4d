"""Post-processing of finished embeddings that some clients ask for.

``dimensions`` serves Matryoshka-trained models: their leading dimensions are a usable
embedding by themselves once re-normalised. ``base64`` of little-endian float32 is the
compact encoding OpenAI's client asks for by default (a quarter of the JSON size).
"""

from __future__ import annotations

import base64

import numpy as np

from embed_server.errors import BadRequest
from embed_server.inference import l2_normalize


def truncate(vectors: np.ndarray, dimensions: int, field: str = "dimensions") -> np.ndarray:
    width = vectors.shape[1]
    if dimensions > width:
        raise BadRequest(f"{field}: {dimensions} is more than the model's {width} dimensions")
    return l2_normalize(vectors[:, :dimensions].astype(np.float32))


def to_base64(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
