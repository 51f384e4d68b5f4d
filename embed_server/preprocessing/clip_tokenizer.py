"""open_clip's byte-level BPE tokenizer, reimplemented without torch.

The API process must not import torch (open_clip's tokenizer module does), yet CLIP text
must get exactly the ids open_clip gives: same text cleaning (ftfy, HTML unescape,
whitespace, optional lower-casing or canonicalisation), same pre-tokenising pattern, same
merges, and on truncation the end-of-text token kept as the last id. Tests compare ids with
open_clip's own tokenizer.
"""

from __future__ import annotations

import gzip
import html
import string
from functools import lru_cache
from pathlib import Path

import ftfy
import numpy as np
import regex

_MERGE_COUNT = 49152 - 256 - 2
SPECIAL_TOKENS = ("<start_of_text>", "<end_of_text>")


@lru_cache(maxsize=1)
def _byte_to_char() -> dict[int, str]:
    """Map every byte to a printable character, so BPE works on strings of bytes."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _basic_clean(text: str) -> str:
    return html.unescape(html.unescape(ftfy.fix_text(text))).strip()


def _squash_whitespace(text: str) -> str:
    return " ".join(text.split()).strip()


_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)


def clean_text(text: str, mode: str) -> str:
    """open_clip's text cleaning by name: `lower`, `whitespace` or `canonicalize`."""
    cleaned = _basic_clean(text)
    if mode == "lower":
        return _squash_whitespace(cleaned).lower()
    if mode == "whitespace":
        return _squash_whitespace(cleaned)
    if mode == "canonicalize":
        return _squash_whitespace(cleaned.replace("_", " ").translate(_NO_PUNCTUATION).lower())
    raise ValueError(f"unknown text cleaning {mode!r}")


class ClipTokenizer:
    def __init__(self, vocab_path: Path, context_length: int, clean: str = "lower") -> None:
        lines = gzip.open(vocab_path).read().decode("utf-8").split("\n")[1 : _MERGE_COUNT + 1]
        merges = [tuple(line.split()) for line in lines]
        symbols = list(_byte_to_char().values())
        vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m) for m in merges]
        vocab.extend(SPECIAL_TOKENS)
        self._ids = {token: i for i, token in enumerate(vocab)}
        self._ranks = {pair: i for i, pair in enumerate(merges)}
        self._cache: dict[str, list[int]] = {}
        self._pattern = regex.compile(
            "|".join(SPECIAL_TOKENS)
            + r"""|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+""",
            regex.IGNORECASE,
        )
        self.sot_id = self._ids[SPECIAL_TOKENS[0]]
        self.eot_id = self._ids[SPECIAL_TOKENS[1]]
        self.context_length = context_length
        self._clean_mode = clean

    def _word_ids(self, word: str) -> list[int]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        if word in SPECIAL_TOKENS:
            ids = [self._ids[word]]
        else:
            parts = [*word[:-1], word[-1] + "</w>"]
            while len(parts) > 1:
                ranked = [
                    (self._ranks.get((a, b), _MERGE_COUNT + 1), i)
                    for i, (a, b) in enumerate(zip(parts, parts[1:], strict=False))
                ]
                best_rank, _ = min(ranked)
                if best_rank > _MERGE_COUNT:
                    break
                first, second = next(
                    (parts[i], parts[i + 1]) for rank, i in ranked if rank == best_rank
                )
                merged: list[str] = []
                i = 0
                while i < len(parts):
                    if i + 1 < len(parts) and parts[i] == first and parts[i + 1] == second:
                        merged.append(first + second)
                        i += 2
                    else:
                        merged.append(parts[i])
                        i += 1
                parts = merged
            ids = [self._ids[p] for p in parts]
        if len(self._cache) < 100_000:
            self._cache[word] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        byte_chars = _byte_to_char()
        ids: list[int] = []
        for piece in self._pattern.findall(clean_text(text, self._clean_mode)):
            ids.extend(self._word_ids("".join(byte_chars[b] for b in piece.encode("utf-8"))))
        return ids

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, list[int]]:
        """int64 ids of shape (len(texts), context_length) and each text's token count."""
        out = np.zeros((len(texts), self.context_length), dtype=np.int64)
        counts = []
        for row, text in enumerate(texts):
            ids = [self.sot_id, *self.encode(text), self.eot_id]
            if len(ids) > self.context_length:
                ids = ids[: self.context_length]
                ids[-1] = self.eot_id
            out[row, : len(ids)] = ids
            counts.append(len(ids))
        return out, counts
