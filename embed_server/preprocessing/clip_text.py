"""Token ids of OpenCLIP text, exactly as open_clip's tokenizers give them, without torch.

Every OpenCLIP tokenizer the server accepts runs here through the Rust ``tokenizers``
library: open_clip's own BPE (``SimpleTokenizer``, rebuilt by ``clip_bpe``) and the Hugging
Face tokenizers of SigLIP, roberta / xlm-roberta towers and ``hf-hub:`` models (their
``tokenizer.json``, saved at conversion). What open_clip does around them is replayed in
the same order: its text cleaning, truncation and padding to the context length, and
optionally zeroing the separator token. The converter checks the ids against open_clip's
before a model is accepted.
"""

from __future__ import annotations

import html
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ftfy
import numpy as np
from tokenizers import Tokenizer

from embed_server.preprocessing.clip_bpe import build_tokenizer, pre_tokens

# Metadata ``text.type`` of models using open_clip's own BPE; "hf" for the others.
OPEN_CLIP_BPE = "clip_bpe"

_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def _squash_whitespace(text: str) -> str:
    return " ".join(text.split()).strip()


def clean_text(text: str, mode: str) -> str:
    """open_clip's text cleaning by name: `lower`, `whitespace` or `canonicalize`."""
    cleaned = html.unescape(html.unescape(ftfy.fix_text(text))).strip()
    if mode == "lower":
        return _squash_whitespace(cleaned).lower()
    if mode == "whitespace":
        return _squash_whitespace(cleaned)
    if mode == "canonicalize":
        return _squash_whitespace(cleaned.replace("_", " ").translate(_NO_PUNCTUATION).lower())
    raise ValueError(f"unknown text cleaning {mode!r}")


@dataclass(frozen=True)
class ClipTextSettings:
    """A CLIP text tokenizer's metadata (``metadata["text"]``), defaults filled in.

    open_clip's BPE pads with id 0 on the right; models converted before its
    ``tokenizer.json`` existed name only ``vocab_file``.
    """

    type: str
    context_length: int
    clean: str
    tokenizer_file: str | None = None
    vocab_file: str | None = None
    pad_token_id: int = 0
    pad_token: str | None = None
    strip_sep_id: int | None = None
    padding_side: str = "right"
    truncation_side: str = "right"

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> ClipTextSettings:
        sep = meta.get("sep_token_id")
        return cls(
            type=str(meta["type"]),
            context_length=int(meta["context_length"]),
            clean=str(meta["clean"]),
            tokenizer_file=meta.get("tokenizer_file"),
            vocab_file=meta.get("vocab_file"),
            pad_token_id=int(meta.get("pad_token_id", 0)),
            pad_token=meta.get("pad_token"),
            strip_sep_id=int(sep) if meta.get("strip_sep_token") and sep is not None else None,
            padding_side=str(meta.get("padding_side", "right")),
            truncation_side=str(meta.get("truncation_side", "right")),
        )


class ClipTextTokenizer:
    def __init__(self, tokenizer: Tokenizer, settings: ClipTextSettings) -> None:
        self.context_length = settings.context_length
        self._clean_mode = settings.clean
        self._strip_sep_id = settings.strip_sep_id
        # open_clip's BPE is split into pre-tokens here, with its own pattern, and cut at
        # the context length; a Hugging Face tokenizer gets the whole cleaned text.
        self._pre_split = settings.type == OPEN_CLIP_BPE
        tokenizer.enable_truncation(
            max_length=self.context_length,
            strategy="longest_first",
            direction=settings.truncation_side,
        )
        pad_token = settings.pad_token or tokenizer.id_to_token(settings.pad_token_id)
        tokenizer.enable_padding(
            direction=settings.padding_side,
            pad_id=settings.pad_token_id,
            pad_token=pad_token,
            length=self.context_length,
        )
        self._tokenizer = tokenizer

    @classmethod
    def from_model_dir(cls, folder: Path, metadata: dict[str, Any]) -> ClipTextTokenizer:
        settings = ClipTextSettings.from_metadata(metadata)
        if settings.tokenizer_file is not None:
            tokenizer = Tokenizer.from_file(str(folder / settings.tokenizer_file))
        elif settings.type == OPEN_CLIP_BPE and settings.vocab_file is not None:
            tokenizer = build_tokenizer(folder / settings.vocab_file)
        else:
            raise ValueError(f"text tokenizer {settings.type!r} names no tokenizer file")
        return cls(tokenizer, settings)

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """int64 ids of shape (len(texts), context_length) and each text's token count."""
        cleaned = [clean_text(t, self._clean_mode) for t in texts]
        if self._pre_split:
            words = [pre_tokens(text, self.context_length) for text in cleaned]
            encodings = self._tokenizer.encode_batch(words, is_pretokenized=True)
        else:
            encodings = self._tokenizer.encode_batch(cleaned)
        ids = np.array([e.ids for e in encodings], dtype=np.int64).reshape(len(texts), -1)
        counts = [int(sum(e.attention_mask)) for e in encodings]
        if self._strip_sep_id is not None:
            ids[ids == self._strip_sep_id] = 0
        return ids, counts
