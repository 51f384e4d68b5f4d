"""open_clip's own BPE tokenizer as a Rust ``tokenizers`` pipeline (no torch, linear time).

open_clip's ``SimpleTokenizer`` is a Python BPE whose merge loop is quadratic in a word's
length (a 19,999-character word took 11 s). The same vocabulary and merges run here in the
``tokenizers`` library: open_clip's byte-to-character alphabet (the GPT-2 one, which the
``ByteLevel`` pre-tokenizer uses), ``</w>`` marking a word's last symbol, its pre-tokenising
pattern, and ``<start_of_text>`` / ``<end_of_text>`` added by a template, so truncation
to the context length keeps end-of-text last, as open_clip does. Text cleaning (ftfy, HTML,
whitespace, case) stays in Python (``clip_text.clean_text``). The converter saves the
result as ``tokenizer.json`` and checks it id for id against open_clip; models converted
before that are rebuilt from their vocabulary file with this same function.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

import regex
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers, processors

START, END = "<start_of_text>", "<end_of_text>"
# open_clip reads exactly this many merges from its vocabulary file.
_MERGE_COUNT = 49152 - 256 - 2
_SPECIALS_AND_CONTRACTIONS = rf"{START}|{END}|'s|'t|'re|'ve|'m|'ll|'d"
_WORDS = r"[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"
# open_clip's pattern, compiled with IGNORECASE; only its fixed strings have a case.
_PRE_TOKENS = regex.compile(f"{_SPECIALS_AND_CONTRACTIONS}|{_WORDS}", regex.IGNORECASE)


def _byte_alphabet() -> list[str]:
    """open_clip's (and GPT-2's) printable stand-in for each byte, in open_clip's order."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {b: chr(b) for b in printable}
    unprintable = [b for b in range(256) if b not in chars]
    chars.update({b: chr(256 + n) for n, b in enumerate(unprintable)})
    return list(chars.values())


def build_tokenizer(vocab_file: Path) -> Tokenizer:
    """The ``tokenizers`` form of open_clip's ``SimpleTokenizer`` for this vocabulary file.

    Ids are assigned in open_clip's order: the 256 byte characters, the same with ``</w>``,
    one token per merge, then the two special tokens (a later duplicate wins, as in its
    ``dict(zip(vocab, range))``). Truncation and padding are left to the caller, which
    knows the model's context length.
    """
    lines = gzip.open(vocab_file).read().decode("utf-8").split("\n")[1 : _MERGE_COUNT + 1]
    merges = [tuple(line.split()) for line in lines]
    symbols = _byte_alphabet()
    vocab = [*symbols, *(s + "</w>" for s in symbols), *("".join(m) for m in merges), START, END]
    ids = {token: i for i, token in enumerate(vocab)}
    tokenizer = Tokenizer(models.BPE(ids, merges, end_of_word_suffix="</w>", fuse_unk=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                Regex(f"(?i:{_SPECIALS_AND_CONTRACTIONS})|{_WORDS}"),
                behavior="removed",
                invert=True,
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    # Matched only where a pre-token is exactly the lower-case form, as open_clip's cache.
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in (START, END)]
    )
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{START} $A {END}", special_tokens=[(START, ids[START]), (END, ids[END])]
    )
    return tokenizer


def pre_tokens(text: str, limit: int) -> list[str]:
    """The first ``limit`` pre-tokens of cleaned text, split exactly as open_clip splits it.

    Every pre-token yields at least one token, so a model with a context of ``limit``
    tokens never sees anything past them: cutting here bounds the BPE work by the context
    length instead of the text's length, and changes no id. Splitting in Python with
    open_clip's own pattern (and the ``regex`` module it uses) also keeps its quirks: a
    special token glued to punctuation (``!<end_of_text>``) is not special there.
    """
    matches: Iterator[regex.Match[str]] = _PRE_TOKENS.finditer(text)
    return [m.group() for m in islice(matches, limit)]
