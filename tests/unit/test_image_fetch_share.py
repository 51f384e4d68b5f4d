"""Each request gets a fair share of the shared image connection pool.

The service runs with the real fetcher against the real slow HTTP server on 127.0.0.1
(``tests/images.py``); only Triton and the repository are faked (the boundaries).
"""

from __future__ import annotations

import asyncio
import time

from embed_server.inference import RequestLimits
from embed_server.model_names import ModelRef
from tests.unit.fakes import FakeTriton, add_converted_model, inference_service
from tests.unit.test_image_fetch import fetcher as image_fetcher

REF = ModelRef(name="clip", kind="clip", triton_models={"text": "clip_text", "image": "clip_img"})


def test_a_request_of_64_slow_urls_leaves_connections_for_other_requests(image_server, tmp_path):
    """Before, the 64 slow fetches took all 64 connections of the pool for 5 s, and the
    other request's one fast image waited for them."""
    fetcher = image_fetcher(read_timeout_s=10, total_timeout_s=20, max_redirects=0)
    add_converted_model(
        tmp_path,
        "clip",
        "clip_text",
        kind="clip",
        triton_models=REF.triton_models,
        max_batch_size=64,
        image={"height": 32, "width": 32},
    )
    limits = RequestLimits(
        max_items=512, max_text_chars=1000, max_images=64, max_pixels=10**7, deadline_s=30
    )
    service = inference_service(tmp_path, FakeTriton(), fetcher=fetcher, limits=limits)
    slow = [f"{image_server.url}/slow?i={i}" for i in range(64)]
    fast = [f"{image_server.url}/img/square.png"]

    async def run() -> float:
        hog = asyncio.ensure_future(service.embed(REF, None, slow, None))
        await asyncio.sleep(0.5)  # the slow request has taken every connection it may
        started = time.perf_counter()
        try:
            embeddings = await service.embed(REF, None, fast, None)
            assert embeddings.image is not None and embeddings.image.shape == (1, 4)
            return time.perf_counter() - started
        finally:
            hog.cancel()
            await asyncio.gather(hog, return_exceptions=True)
            await fetcher.close()

    elapsed = asyncio.run(run())
    assert elapsed < 2.0, f"the fast request waited {elapsed:.1f} s for the pool"
