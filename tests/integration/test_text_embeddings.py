"""Text embeddings through the real stack: API -> Triton -> Python ONNX Runtime runner."""

from __future__ import annotations

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from tests.conftest import DEFAULT_MODEL, HUB_TEST_ID

pytestmark = pytest.mark.integration

TEXTS = [
    "A man is eating food.",
    "Ok",
    "The new movie is awesome, and the soundtrack is even better than the trailer suggested.",
    "Ein Satz auf Deutsch mit Umlauten: Größe, Übung, Ärger.",
    "",
    " ".join(["This text is far longer than the model's maximum sequence length."] * 80),
]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def infer(client, model: str, texts, **extra) -> np.ndarray:
    response = client.post("/infer", json={"model_name": model, "text": texts, **extra})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["processingTimeMs"] > 0
    assert "image_embeddings" not in body
    return np.array(body["text_embeddings"], dtype=np.float32)


def test_default_model_matches_sentence_transformers(client, reference_default):
    got = infer(client, DEFAULT_MODEL, TEXTS)
    want = reference_default.encode(TEXTS)
    assert got.shape == want.shape == (len(TEXTS), 384)
    assert cosine_rows(got, want).min() >= 0.9999


def test_single_string_text_is_accepted(client, reference_default):
    got = infer(client, DEFAULT_MODEL, "just one sentence")
    want = reference_default.encode(["just one sentence"])
    assert got.shape == (1, 384)
    assert cosine_rows(got, want).min() >= 0.9999


def test_normalize_false_returns_the_embedding_before_normalize(client, reference_default):
    got = infer(client, DEFAULT_MODEL, TEXTS[:3], normalize=False)
    without_normalize = SentenceTransformer(modules=list(reference_default)[:-1], device="cpu")
    want = without_normalize.encode(TEXTS[:3])
    assert not np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


def test_request_larger_than_max_batch_size_is_split_and_ordered(client, reference_default):
    texts = [f"sentence number {i} " + "word " * (i % 17) for i in range(75)]
    got = infer(client, DEFAULT_MODEL, texts)
    want = reference_default.encode(texts)
    assert got.shape == (75, 384)
    assert cosine_rows(got, want).min() >= 0.9999


@pytest.fixture(scope="module")
def local_models_loaded(client, tiny_models):
    for path in (tiny_models.cls_no_normalize, tiny_models.mean_dense):
        response = client.post("/load_sentence_transformer_model", json={"model_name": str(path)})
        assert response.status_code == 200, response.text
    return tiny_models


def test_cls_pooling_without_normalize_matches(client, local_models_loaded):
    path = local_models_loaded.cls_no_normalize
    reference = SentenceTransformer(str(path), device="cpu")
    got = infer(client, str(path), TEXTS)
    want = reference.encode(TEXTS)
    assert cosine_rows(got, want).min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), np.linalg.norm(want, axis=1), rtol=1e-3)


def test_normalize_true_on_a_model_without_normalize(client, local_models_loaded):
    path = local_models_loaded.cls_no_normalize
    reference = SentenceTransformer(str(path), device="cpu")
    got = infer(client, str(path), TEXTS[:3], normalize=True)
    want = reference.encode(TEXTS[:3], normalize_embeddings=True)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    assert cosine_rows(got, want).min() >= 0.9999


def test_dense_layer_after_pooling_matches(client, local_models_loaded):
    path = local_models_loaded.mean_dense
    reference = SentenceTransformer(str(path), device="cpu")
    got = infer(client, str(path), TEXTS)
    want = reference.encode(TEXTS)
    assert got.shape == (len(TEXTS), 24)
    assert cosine_rows(got, want).min() >= 0.9999


def test_hub_id_loads_offline_from_the_local_cache(client, tiny_models):
    response = client.post("/load_sentence_transformer_model", json={"model_name": HUB_TEST_ID})
    assert response.status_code == 200, response.text
    reference = SentenceTransformer(str(tiny_models.cls_no_normalize), device="cpu")
    got = infer(client, HUB_TEST_ID, TEXTS[:2])
    assert cosine_rows(got, reference.encode(TEXTS[:2])).min() >= 0.9999


def test_metadata_is_saved_beside_the_model(server, client):
    models = client.get("/repository_models").json()["models"]
    default = next(m for m in models if m["model_name"] == DEFAULT_MODEL)
    folder = server.repository / default["triton_models"]["text"]
    import json

    meta = json.loads((folder / "embedding_model.json").read_text())
    assert meta["embedding_dim"] == 384
    assert meta["max_seq_length"] == 256
    assert meta["pooling"] == "mean"
    assert meta["normalized"] is True
    assert meta["source"]
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    assert tokenizer["padding"] is None
    assert tokenizer["truncation"]["max_length"] == 256
    config = (folder / "config.pbtxt").read_text()
    for required in ("dynamic_batching", "max_batch_size: 32", "instance_group", "model_warmup"):
        assert required in config
