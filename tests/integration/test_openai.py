"""The OpenAI-compatible routes, driven by the official ``openai`` client against the server."""

from __future__ import annotations

import base64

import numpy as np
import openai
import pytest
from tokenizers import Tokenizer

from tests.conftest import CLIP_ARCH, DEFAULT_MODEL, default_model_dir

pytestmark = pytest.mark.integration

TEXTS = ["A man is eating food.", "The soundtrack is even better than the trailer.", "Ok"]


@pytest.fixture(scope="module")
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(default_model_dir() / "tokenizer.json"))
    tokenizer.no_padding()
    return tokenizer


def vectors(response) -> np.ndarray:
    assert [item.index for item in response.data] == list(range(len(response.data)))
    return np.array([item.embedding for item in response.data], dtype=np.float32)


def test_float_embeddings_match_sentence_transformers(oai, reference_default):
    response = oai.embeddings.create(model=DEFAULT_MODEL, input=TEXTS, encoding_format="float")
    want = reference_default.encode(TEXTS)
    np.testing.assert_allclose(vectors(response), want, atol=2e-4)
    assert response.model == DEFAULT_MODEL
    assert response.object == "list"
    assert all(item.object == "embedding" for item in response.data)
    assert response.usage.prompt_tokens == response.usage.total_tokens > len(TEXTS) * 2


def test_client_default_base64_decodes_to_the_float_vectors(oai, client, reference_default):
    """The client asks for base64 by default and decodes it with numpy itself."""
    decoded = vectors(oai.embeddings.create(model=DEFAULT_MODEL, input=TEXTS))
    np.testing.assert_allclose(decoded, reference_default.encode(TEXTS), atol=2e-4)
    raw = client.post(
        "/v1/embeddings",
        json={"model": DEFAULT_MODEL, "input": TEXTS[0], "encoding_format": "base64"},
    )
    assert raw.status_code == 200, raw.text
    encoded = raw.json()["data"][0]["embedding"]
    little_endian = np.frombuffer(base64.b64decode(encoded), dtype="<f4")
    assert little_endian.shape == (384,)
    np.testing.assert_allclose(little_endian, decoded[0], atol=1e-6)


def test_dimensions_truncates_and_renormalises(oai, reference_default):
    response = oai.embeddings.create(
        model=DEFAULT_MODEL, input=TEXTS, dimensions=64, encoding_format="float"
    )
    got = vectors(response)
    full = reference_default.encode(TEXTS)[:, :64]
    want = full / np.linalg.norm(full, axis=1, keepdims=True)
    assert got.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(got, want, atol=2e-4)


def test_token_arrays_embed_like_the_text_they_encode(oai, tokenizer, reference_default):
    ids = [tokenizer.encode(text).ids for text in TEXTS]
    many = oai.embeddings.create(model=DEFAULT_MODEL, input=ids, encoding_format="float")
    one = oai.embeddings.create(model=DEFAULT_MODEL, input=ids[1], encoding_format="float")
    want = reference_default.encode(TEXTS)
    np.testing.assert_allclose(vectors(many), want, atol=2e-4)
    np.testing.assert_allclose(vectors(one)[0], want[1], atol=2e-4)
    assert many.usage.prompt_tokens == sum(len(row) for row in ids)


def test_token_ids_outside_the_vocabulary_are_a_400_naming_input(oai):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.embeddings.create(model=DEFAULT_MODEL, input=[[101, 99999999, 102]])
    error = caught.value.body
    assert error["param"] == "input"
    assert error["type"] == "invalid_request_error"
    assert "99999999" in error["message"] and "vocabulary" in error["message"]


def test_unknown_model_is_a_404_in_openai_error_shape(oai, client):
    with pytest.raises(openai.NotFoundError) as caught:
        oai.embeddings.create(model="nobody/no-such-model", input="hello")
    assert caught.value.body["code"] == "model_not_found"
    assert caught.value.body["param"] == "model"
    raw = client.post("/v1/embeddings", json={"model": "nobody/no-such-model", "input": "x"})
    assert raw.status_code == 404
    assert set(raw.json()) == {"error"}
    assert set(raw.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": "x", "dimensions": 385}, "dimensions"),
        ({"input": "x", "dimensions": 0}, "dimensions"),
        ({"input": "x", "encoding_format": "int8"}, "encoding_format"),
        ({"input": []}, "input"),
        ({"input": ["a", 3]}, "input"),
        ({}, "input"),
    ],
)
def test_bad_fields_are_400s_naming_the_field(client, body, param):
    response = client.post("/v1/embeddings", json={"model": DEFAULT_MODEL, **body})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param
    assert error["message"].startswith(param)


def test_models_lists_the_loaded_models(oai):
    listed = {model.id: model for model in oai.models.list()}
    assert DEFAULT_MODEL in listed
    assert listed[DEFAULT_MODEL].object == "model"


def test_native_routes_keep_their_detail_error_shape(client):
    response = client.post("/infer", json={"model_name": "nobody/no-such-model", "text": ["x"]})
    assert response.status_code == 404
    assert set(response.json()) == {"detail"}


def test_clip_text_embeddings_through_the_openai_client(oai, client, clip_checkpoint):
    """A CLIP model's id is ``name@pretrained``; its text tower answers as ``/infer`` does by
    default (open_clip's un-normalised ``encode_text``)."""
    loaded = client.post(
        "/load_clip_model", json={"model_name": CLIP_ARCH, "pretrained": str(clip_checkpoint)}
    )
    assert loaded.status_code == 200, loaded.text
    model_id = f"{CLIP_ARCH}@{clip_checkpoint}"
    response = oai.embeddings.create(model=model_id, input=TEXTS, encoding_format="float")
    native = client.post(
        "/infer",
        json={
            "model_name": CLIP_ARCH,
            "pretrained": str(clip_checkpoint),
            "text": TEXTS,
        },
    )
    want = np.array(native.json()["text_embeddings"], dtype=np.float32)
    np.testing.assert_allclose(vectors(response), want, atol=1e-5)
    assert response.model == model_id
    assert model_id in {m.id for m in oai.models.list().data}
