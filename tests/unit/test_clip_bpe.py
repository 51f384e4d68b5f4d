"""open_clip's BPE through the Rust ``tokenizers`` pipeline: open_clip's ids, in linear time."""

from __future__ import annotations

import random
import shutil
import time

import numpy as np
import open_clip
import pytest
import torch

from converters.clip import _tokenizer_metadata
from embed_server.preprocessing.clip_text import ClipTextTokenizer

TEXTS = [
    "a photo of a cat",
    "Hello, WORLD!! it's 2024 &amp; &lt;b&gt; café naïve 日本語 😀",
    "  multiple   spaces\tand\nnewlines ",
    "",
    "don't you'll we've IT'S They'Re '''s",
    "mojibake: â€™ Ã©",
    "Crème brûlée, smörgåsbord, Ærøskøbing, ĳssel, ﬁne ½ ٣ 4.5e10",
    "👨‍👩‍👧‍👦 🏳️‍🌈 family flags 🇫🇷🇯🇵 and 😀😀😀",
    " ".join(["a text much longer than the context length"] * 30),
    "Antidisestablishmentarianism" * 40,
    "<start_of_text> inside <end_of_text>",
    "glued!<end_of_text> x<start_of_text> <START_OF_TEXT> <End_Of_Text>",
    "under_score and punctuation!?",
]


def served_and_reference(
    tmp_path, clean: str, context_length: int
) -> tuple[ClipTextTokenizer, open_clip.tokenizer.SimpleTokenizer]:
    """The tokenizer a conversion saves and the API loads, and open_clip's own."""
    reference = open_clip.tokenizer.SimpleTokenizer(context_length=context_length, clean=clean)
    metadata = _tokenizer_metadata(reference, tmp_path)
    return ClipTextTokenizer.from_model_dir(tmp_path, metadata), reference


@pytest.mark.parametrize("clean", ["lower", "whitespace", "canonicalize"])
@pytest.mark.parametrize("context_length", [77, 16])
def test_token_ids_match_open_clip(tmp_path, clean, context_length):
    served, reference = served_and_reference(tmp_path, clean, context_length)
    ids, counts = served(TEXTS)
    np.testing.assert_array_equal(ids, reference(TEXTS).numpy())
    long = TEXTS.index(" ".join(["a text much longer than the context length"] * 30))
    assert ids[long, -1] == reference.eot_token_id  # end-of-text kept on truncation
    assert counts[long] == context_length
    assert counts[TEXTS.index("")] == 2


def test_models_converted_with_only_a_vocabulary_file_still_tokenize(tmp_path):
    """Metadata written before tokenizer.json existed: built from the vocabulary at load."""
    shutil.copy(open_clip.tokenizer.default_bpe(), tmp_path / "bpe_simple_vocab_16e6.txt.gz")
    old_metadata = {
        "type": "clip_bpe",
        "vocab_file": "bpe_simple_vocab_16e6.txt.gz",
        "context_length": 77,
        "clean": "lower",
    }
    served = ClipTextTokenizer.from_model_dir(tmp_path, old_metadata)
    ids, _ = served(TEXTS)
    np.testing.assert_array_equal(ids, open_clip.tokenizer.SimpleTokenizer()(TEXTS).numpy())


class _OffByOne(open_clip.tokenizer.SimpleTokenizer):
    """open_clip's tokenizer with one id changed, standing in for a tokenizer we mis-copy."""

    def __call__(self, texts, context_length=None) -> torch.Tensor:
        ids = super().__call__(texts, context_length)
        ids[0, 1] += 1
        return ids


def test_a_tokenizer_that_differs_by_one_id_is_refused_with_the_figure(tmp_path):
    with pytest.raises(ValueError, match=r"differs from open_clip's in 1 of \d+ token ids"):
        _tokenizer_metadata(_OffByOne(), tmp_path)


def test_a_19999_character_word_tokenizes_in_milliseconds(tmp_path):
    """The hand-written BPE took 10.9 s (quadratic in the word's length)."""
    served, reference = served_and_reference(tmp_path, "lower", 77)
    word = "".join(random.Random(1).choices("abcdefghijklmnopqrstuvwxyz", k=19_999))
    started = time.perf_counter()
    ids, counts = served([word])
    assert time.perf_counter() - started < 1.0
    assert counts == [77] and ids[0, 0] == reference.sot_token_id
    assert ids[0, -1] == reference.eot_token_id


def test_512_texts_of_50000_characters_tokenize_within_seconds(tmp_path):
    """Only the first context-length pre-tokens of a text reach the BPE.

    Distinct random words of about 80 letters: the hand-written BPE spent milliseconds on
    each of the 600 words of every text; now 77 words per text are tokenised.
    """
    served, _ = served_and_reference(tmp_path, "lower", 77)
    rng = np.random.default_rng(2)
    letters = rng.integers(ord("a"), ord("z") + 1, size=(512, 50_000), dtype=np.uint8)
    letters[rng.random(letters.shape) < 1 / 80] = ord(" ")
    texts = [row.tobytes().decode("ascii") for row in letters]
    started = time.perf_counter()
    ids, counts = served(texts)
    assert time.perf_counter() - started < 20.0
    assert ids.shape == (512, 77) and set(counts) == {77}
