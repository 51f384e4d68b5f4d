from tokenizers import Tokenizer

from embed_server.preprocessing.text import TextPreprocessor
from tests.conftest import default_model_dir


def tokenizer(max_length: int) -> Tokenizer:
    tok = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def test_pads_to_the_longest_text_not_the_model_maximum():
    batch = TextPreprocessor(tokenizer(256), {}).encode(["a", "a b c d e"])
    assert batch.input_ids.shape == (2, 7)
    assert batch.token_counts == [3, 7]
    assert batch.attention_mask.sum(1).tolist() == [3, 7]


def test_bucketed_padding_for_the_native_backend():
    batch = TextPreprocessor(tokenizer(256), {}, pad_to_multiple_of=16).encode(["a b c"])
    assert batch.input_ids.shape == (1, 16)


def test_truncates_to_the_model_maximum_keeping_the_end_token():
    batch = TextPreprocessor(tokenizer(12), {}).encode(["word " * 100])
    assert batch.input_ids.shape == (1, 12)
    assert batch.input_ids[0, -1] == 102  # [SEP]


def test_default_prompt_and_lowercase_come_from_metadata():
    meta = {"lowercase": True, "prompts": {"query": "query: "}, "default_prompt_name": "query"}
    plain = TextPreprocessor(tokenizer(64), {}).encode(["query: hello"])
    prompted = TextPreprocessor(tokenizer(64), meta).encode(["HELLO"])
    assert prompted.input_ids.tolist() == plain.input_ids.tolist()
