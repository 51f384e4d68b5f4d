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

from embed_server.errors import BadRequest


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

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def check_ids(self, rows: list[list[int]], max_length: int) -> None:
        """Check token ids a client already has against this vocabulary and length limit.

        Ids go to the model as given (special tokens included, as ``encode`` would add
        them); a row longer than the model takes is refused rather than silently cut.
        """
        vocab = self.vocab_size
        for index, row in enumerate(rows):
            if not row:
                raise BadRequest(f"input.{index}: a token array must not be empty")
            if len(row) > max_length:
                raise BadRequest(
                    f"input.{index}: {len(row)} tokens exceed the model's limit of {max_length}"
                )
            bad = next((t for t in row if not 0 <= t < vocab), None)
            if bad is not None:
                raise BadRequest(
                    f"input.{index}: token id {bad} is outside the vocabulary (0..{vocab - 1})"
                )

    def pad_ids(self, rows: list[list[int]]) -> TokenBatch:
        counts = [len(row) for row in rows]
        width = -(-max(counts) // self._multiple) * self._multiple
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for index, row in enumerate(rows):
            ids[index, : counts[index]] = row
            mask[index, : counts[index]] = 1
        return TokenBatch(ids, mask, counts)

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
