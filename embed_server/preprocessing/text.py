"""Tokenise texts in the API process, the way the model's own library would.

Hugging Face ``tokenizers`` (Rust) batch-encodes quickly, and tokenising here lets the API
know token counts and send only ids to Triton. Padding is to the request's longest text;
for Triton's native ONNX Runtime backend, which cannot take ragged batches, the width is
rounded up to a bucket so that requests of similar length share a shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer


@dataclass(frozen=True)
class TokenBatch:
    input_ids: np.ndarray
    attention_mask: np.ndarray
    token_counts: list[int]


class TextPreprocessor:
    def __init__(self, tokenizer: Tokenizer, metadata: dict[str, Any], pad_to_multiple_of: int = 1):
        self._tokenizer = tokenizer
        self._lowercase = bool(metadata.get("lowercase"))
        prompts = metadata.get("prompts") or {}
        default = metadata.get("default_prompt_name")
        self._prompt = prompts.get(default, "") if default else ""
        self._multiple = max(1, pad_to_multiple_of)

    @classmethod
    def from_model_dir(
        cls, folder: Path, metadata: dict[str, Any], pad_to_multiple_of: int = 1
    ) -> TextPreprocessor:
        return cls(
            Tokenizer.from_file(str(folder / "tokenizer.json")), metadata, pad_to_multiple_of
        )

    def encode(self, texts: list[str]) -> TokenBatch:
        prepared = [self._prompt + (t.lower() if self._lowercase else t) for t in texts]
        encodings = self._tokenizer.encode_batch(prepared)
        counts = [len(e.ids) for e in encodings]
        width = max(counts)
        width = -(-width // self._multiple) * self._multiple
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            ids[row, : counts[row]] = encoding.ids
            mask[row, : counts[row]] = 1
        return TokenBatch(ids, mask, counts)
