"""Hugging Face tokenised CLIP text: the API's ids equal open_clip's ``HFTokenizer``'s."""

from __future__ import annotations

import numpy as np
import pytest
from open_clip.tokenizer import HFTokenizer

from converters.clip import _tokenizer_metadata
from embed_server.preprocessing.clip_text import ClipTextTokenizer
from tests.clip_hub import byte_level_bpe_tokenizer, unigram_tokenizer

TEXTS = [
    "a photo of a cat",
    "",
    "   TWO   dogs,\tplaying\nin the SNOW!!  ",
    "caf\u00e9 &amp; cr\u00e8me br\u00fbl\u00e9e",
    "under_scores and-dashes 123 4.5",
    "\U0001f431 emoji and \u6771\u4eac",
    "the quick brown fox " * 30,
]


@pytest.mark.parametrize(
    ("builder", "options"),
    [
        (unigram_tokenizer, {"clean": "canonicalize"}),
        (byte_level_bpe_tokenizer, {"clean": "whitespace"}),
        (byte_level_bpe_tokenizer, {"clean": "lower", "strip_sep_token": True}),
        (byte_level_bpe_tokenizer, {"padding_side": "left", "truncation_side": "left"}),
    ],
    ids=["sentencepiece-canonicalize", "bpe-whitespace", "bpe-strip-sep", "bpe-left-sides"],
)
def test_token_ids_match_open_clip(tmp_path, builder, options):
    builder(tmp_path / "tokenizer")
    reference = HFTokenizer(str(tmp_path / "tokenizer"), context_length=20, **options)
    served_dir = tmp_path / "served"
    served_dir.mkdir()
    settings = _tokenizer_metadata(reference, served_dir)
    served = ClipTextTokenizer.from_model_dir(served_dir, settings)
    ids, counts = served(TEXTS)
    want = reference(TEXTS).numpy()
    np.testing.assert_array_equal(ids, want)
    assert counts[-1] == 20 and 0 < counts[0] < 20


def test_unsupported_tokenizer_modes_are_refused(tmp_path):
    byte_level_bpe_tokenizer(tmp_path / "tokenizer")
    reference = HFTokenizer(str(tmp_path / "tokenizer"), context_length=20, tokenizer_mode="clips")
    with pytest.raises(ValueError, match="not supported"):
        _tokenizer_metadata(reference, tmp_path)
