"""Hugging Face tokenizers of OpenCLIP models (SigLIP, roberta / xlm-roberta towers, hf-hub).

open_clip's ``HFTokenizer`` cleans each text, then calls the ``transformers`` tokenizer
with truncation and ``padding="max_length"`` at the model's context length (optionally
zeroing the separator token). The conversion saves that tokenizer's ``tokenizer.json`` and
settings; this class replays the same steps with the Rust ``tokenizers`` library, so the
API needs neither torch nor transformers. The converter checks the ids against open_clip's
before a model is accepted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from embed_server.preprocessing.clip_tokenizer import clean_text


class HfClipTokenizer:
    def __init__(self, tokenizer_file: Path, settings: dict[str, Any]) -> None:
        self.context_length = int(settings["context_length"])
        self._clean_mode = str(settings["clean"])
        sep = settings.get("sep_token_id")
        strip = settings.get("strip_sep_token") and sep is not None
        self._strip_sep_id = int(sep) if strip else None
        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.enable_truncation(
            max_length=self.context_length,
            strategy="longest_first",
            direction=str(settings.get("truncation_side", "right")),
        )
        tokenizer.enable_padding(
            direction=str(settings.get("padding_side", "right")),
            pad_id=int(settings["pad_token_id"]),
            pad_token=str(settings["pad_token"]),
            length=self.context_length,
        )
        self._tokenizer = tokenizer

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """int64 ids of shape (len(texts), context_length) and each text's token count."""
        encodings = self._tokenizer.encode_batch([clean_text(t, self._clean_mode) for t in texts])
        ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(len(texts), -1)
        counts = [int(sum(e.attention_mask)) for e in encodings]
        if self._strip_sep_id is not None:
            ids[ids == self._strip_sep_id] = 0
        return ids, counts
