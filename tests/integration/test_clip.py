"""OpenCLIP through the real stack, compared with open_clip on the same inputs."""

from __future__ import annotations

import base64
import io
import threading
import time

import httpx
import numpy as np
import open_clip
import pytest
import torch
from PIL import Image

from tests.clip_hub import build_hub_clip, publish_pretrained_tag
from tests.conftest import CLIP_ARCH, api_without_triton

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def clip_loaded(client, clip_checkpoint):
    response = client.post(
        "/load_clip_model", json={"model_name": CLIP_ARCH, "pretrained": str(clip_checkpoint)}
    )
    assert response.status_code == 200, response.text
    return clip_checkpoint


@pytest.fixture(scope="module")
def reference(clip_checkpoint):
    model, _, preprocess = open_clip.create_model_and_transforms(
        CLIP_ARCH, pretrained=str(clip_checkpoint)
    )
    return model.eval(), preprocess, open_clip.get_tokenizer(CLIP_ARCH)


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def infer(client, checkpoint, **fields) -> dict:
    body = {"model_name": CLIP_ARCH, "pretrained": str(checkpoint), **fields}
    response = client.post("/infer", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_image_kinds_match_open_clip(client, clip_loaded, reference, image_server):
    model, preprocess, _ = reference
    names = sorted(n for n in image_server.images if n not in ("bomb.png", "large.jpg"))
    body = infer(client, clip_loaded, image=[f"{image_server.url}/img/{n}" for n in names])
    assert "text_embeddings" not in body
    got = np.array(body["image_embeddings"], dtype=np.float32)
    images = [Image.open(io.BytesIO(image_server.images[n][0])) for n in names]
    with torch.no_grad():
        want = model.encode_image(torch.stack([preprocess(i) for i in images])).numpy()
    assert got.shape == want.shape
    cosines = cosine_rows(got, want)
    assert cosines.min() >= 0.999, dict(zip(names, cosines.round(5), strict=True))


def test_text_and_image_in_one_call_with_data_uri(client, clip_loaded, reference, image_server):
    model, preprocess, tokenizer = reference
    texts = ["a photo of a cat", " ".join(["longer than the context length"] * 40)]
    data, kind = image_server.images["palette.gif"]
    data_uri = f"data:{kind};base64,{base64.b64encode(data).decode()}"
    body = infer(client, clip_loaded, text=texts, image=[data_uri], normalize=True)
    with torch.no_grad():
        want_text = model.encode_text(tokenizer(texts), normalize=True).numpy()
        image = preprocess(Image.open(io.BytesIO(data))).unsqueeze(0)
        want_image = model.encode_image(image, normalize=True).numpy()
    got_text = np.array(body["text_embeddings"], dtype=np.float32)
    got_image = np.array(body["image_embeddings"], dtype=np.float32)
    assert cosine_rows(got_text, want_text).min() >= 0.999
    assert cosine_rows(got_image, want_image).min() >= 0.999
    np.testing.assert_allclose(np.linalg.norm(got_text, axis=1), 1.0, atol=1e-4)


def test_default_is_open_clips_unnormalized_output(client, clip_loaded, reference):
    model, _, tokenizer = reference
    body = infer(client, clip_loaded, text="a diagram")
    with torch.no_grad():
        want = model.encode_text(tokenizer(["a diagram"])).numpy()
    got = np.array(body["text_embeddings"], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-4)


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/slow", "timed out"),
        ("/big", "larger than the limit"),
        ("/loop", "redirects"),
        ("/html", "is not an image"),
        ("/garbage", "not a decodable image"),
        ("/img/bomb.png", "decompression bomb"),
    ],
)
def test_bad_images_are_400_naming_the_item(client, clip_loaded, image_server, path, reason):
    good = f"{image_server.url}/img/square.png"
    response = client.post(
        "/infer",
        json={
            "model_name": CLIP_ARCH,
            "pretrained": str(clip_loaded),
            "image": [good, image_server.url + path],
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["detail"].startswith("image.1: ")
    assert reason in response.json()["detail"]


def test_too_many_images_is_400(client, clip_loaded, image_server):
    images = [f"{image_server.url}/img/square.png"] * 121
    response = client.post(
        "/infer", json={"model_name": CLIP_ARCH, "pretrained": str(clip_loaded), "image": images}
    )
    assert response.status_code == 400
    assert "exceed the limit of 120" in response.json()["detail"]


def test_clip_load_errors(client, tiny_models):
    unknown = client.post(
        "/load_clip_model", json={"model_name": "No-Such-Arch", "pretrained": "x"}
    )
    assert unknown.status_code == 404
    assert "not an OpenCLIP architecture" in unknown.json()["detail"]
    missing = client.post(
        "/load_clip_model",
        json={"model_name": CLIP_ARCH, "pretrained": str(tiny_models.root / "nope.pt")},
    )
    assert missing.status_code == 404
    outside = client.post(
        "/load_clip_model", json={"model_name": CLIP_ARCH, "pretrained": "/etc/x"}
    )
    assert outside.status_code == 400
    assert "pretrained" in outside.json()["detail"]


def test_health_answers_while_a_hundred_large_images_are_processed(
    client, server, clip_loaded, image_server
):
    images = [f"{image_server.url}/img/large.jpg?n={i}" for i in range(100)]
    outcome: dict[str, httpx.Response] = {}

    def heavy() -> None:
        outcome["response"] = httpx.post(
            server.url + "/infer",
            json={"model_name": CLIP_ARCH, "pretrained": str(clip_loaded), "image": images},
            timeout=300,
        )

    worker = threading.Thread(target=heavy)
    worker.start()
    latencies = []
    time.sleep(0.3)
    while worker.is_alive():
        started = time.monotonic()
        assert client.get("/health").status_code == 200
        latencies.append(time.monotonic() - started)
        time.sleep(0.05)
    worker.join()
    assert outcome["response"].status_code == 200, outcome["response"].text
    assert len(outcome["response"].json()["image_embeddings"]) == 100
    assert len(latencies) >= 5, "the request finished too fast to show anything"
    assert max(latencies) < 1.0, max(latencies)


def test_huge_single_word_texts_answer_quickly_and_health_stays_fast(
    client, server, clip_loaded, reference
):
    """A 19,999-character word blocked the event loop for 11 s in the hand-written BPE."""
    model, _, tokenizer = reference
    rng = np.random.default_rng(5)
    words = [
        rng.integers(ord("a"), ord("z") + 1, size=50_000, dtype=np.uint8).tobytes().decode()
        for _ in range(8)
    ]
    checked = "supercalifragilistic" * 100  # long enough to matter, short for open_clip
    body = {"model_name": CLIP_ARCH, "pretrained": str(clip_loaded), "text": [checked, *words]}
    infer(client, clip_loaded, text="warm up")  # the tokenizer is loaded once per model
    outcomes: list[tuple[httpx.Response, float]] = []

    def heavy() -> None:
        started = time.monotonic()
        response = httpx.post(server.url + "/infer", json=body, timeout=120)
        outcomes.append((response, time.monotonic() - started))

    workers = [threading.Thread(target=heavy) for _ in range(3)]
    for worker in workers:
        worker.start()
    latencies = []
    while any(worker.is_alive() for worker in workers):
        started = time.monotonic()
        assert client.get("/health").status_code == 200
        latencies.append(time.monotonic() - started)
        time.sleep(0.02)
    for worker in workers:
        worker.join()
    assert [r.status_code for r, _ in outcomes] == [200, 200, 200], outcomes[0][0].text
    assert max(seconds for _, seconds in outcomes) < 15, [s for _, s in outcomes]
    assert max(latencies) < 0.2, max(latencies)
    with torch.no_grad():
        want = model.encode_text(tokenizer([checked])).numpy()
    for response, _ in outcomes:
        got = np.array(response.json()["text_embeddings"][:1], dtype=np.float32)
        assert cosine_rows(got, want).min() >= 0.999


def test_private_urls_are_refused_by_default(server, clip_loaded, image_server, tiny_models):
    """An API with the default setting refuses loopback and metadata addresses (400)."""
    with api_without_triton(
        server.repository,
        EMBED_LOCAL_MODEL_DIRS=str(tiny_models.root),
        EMBED_ALLOW_PRIVATE_URLS="false",
    ) as url:
        for target in (
            f"{image_server.url}/img/square.png",
            f"http://localhost:{image_server.port}/img/square.png",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::1]/x.png",
        ):
            response = httpx.post(
                url + "/infer",
                json={"model_name": CLIP_ARCH, "pretrained": str(clip_loaded), "image": [target]},
            )
            assert response.status_code == 400, (target, response.text)
            assert response.json()["detail"].startswith("image.0: refused")


@pytest.fixture(scope="module", params=["siglip", "roberta"])
def hub_clip(request, client, tiny_models):
    """A toy model published to the server's (offline) Hugging Face cache, loaded by name."""
    hub = build_hub_clip(tiny_models.hf_home, request.param, seed=7)
    response = client.post("/load_clip_model", json={"model_name": hub.model_name})
    assert response.status_code == 200, response.text
    return hub


def test_hub_models_with_hugging_face_tokenizers_match_open_clip(client, hub_clip, image_server):
    texts = [
        "a photo of a cat",
        "TWO Dogs,   playing in the snow!",
        "Caf\u00e9 cr\u00e8me &amp; croissant",
        " ".join(["longer than the context length"] * 20),
    ]
    body = client.post(
        "/infer",
        json={
            "model_name": hub_clip.model_name,
            "text": texts,
            "image": [f"{image_server.url}/img/portrait.png"],
        },
    )
    assert body.status_code == 200, body.text
    ids = hub_clip.tokenizer(texts)
    assert ids[-1, -1] != ids[0, -1], "the long text should fill the context, short ones not"
    image = Image.open(io.BytesIO(image_server.images["portrait.png"][0]))
    with torch.no_grad():
        want_text = hub_clip.model.encode_text(ids).numpy()
        want_image = hub_clip.model.encode_image(hub_clip.preprocess(image).unsqueeze(0)).numpy()
    got_text = np.array(body.json()["text_embeddings"], dtype=np.float32)
    got_image = np.array(body.json()["image_embeddings"], dtype=np.float32)
    assert got_text.shape == want_text.shape
    assert cosine_rows(got_text, want_text).min() >= 0.999, cosine_rows(got_text, want_text)
    assert cosine_rows(got_image, want_image).min() >= 0.999


TAGGED_ARCH, TAG = "ViTamin-S", "datacomp1b"


def test_a_pretrained_tag_loads_through_open_clips_download_from_the_cache(
    client, tiny_models, image_server
):
    """The tag resolves as open_clip resolves it (its Hugging Face file), offline."""
    weights = publish_pretrained_tag(tiny_models.hf_home, TAGGED_ARCH, TAG, seed=11)
    loaded = client.post("/load_clip_model", json={"model_name": TAGGED_ARCH, "pretrained": TAG})
    assert loaded.status_code == 200, loaded.text
    texts = ["a photo of a cat", "a diagram"]
    body = client.post(
        "/infer",
        json={
            "model_name": TAGGED_ARCH,
            "pretrained": TAG,
            "text": texts,
            "image": [f"{image_server.url}/img/landscape.jpg"],
        },
    )
    assert body.status_code == 200, body.text
    model, _, preprocess = open_clip.create_model_and_transforms(
        TAGGED_ARCH, pretrained=str(weights)
    )
    image = Image.open(io.BytesIO(image_server.images["landscape.jpg"][0]))
    with torch.no_grad():
        want_text = model.eval().encode_text(open_clip.get_tokenizer(TAGGED_ARCH)(texts)).numpy()
        want_image = model.encode_image(preprocess(image).unsqueeze(0)).numpy()
    got_text = np.array(body.json()["text_embeddings"], dtype=np.float32)
    got_image = np.array(body.json()["image_embeddings"], dtype=np.float32)
    assert cosine_rows(got_text, want_text).min() >= 0.999
    assert cosine_rows(got_image, want_image).min() >= 0.999
    deleted = client.post("/delete_model", json={"model_name": TAGGED_ARCH, "pretrained": TAG})
    assert deleted.status_code == 200, deleted.text
