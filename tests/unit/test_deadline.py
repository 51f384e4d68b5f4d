"""One deadline end to end: each Triton call carries what remains of the request's own
deadline, as Triton's queue timeout and as the bound of the HTTP wait."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from embed_server.errors import DeadlineExceeded
from embed_server.model_names import sentence_transformer_ref
from embed_server.triton import TritonGateway
from tests.unit.fakes import FakeTriton, inference_service
from tests.unit.test_triton_http import StandIn, ok


def test_each_triton_call_gets_what_remains_of_the_request_deadline(tmp_path):
    triton = FakeTriton()
    inference = inference_service(tmp_path, triton, deadline_s=5.0)
    ref = sentence_transformer_ref("org/m", [])

    async def work():
        await asyncio.sleep(1.0)
        return await inference._infer("m", {}, ["embedding"])

    asyncio.run(inference._guarded(ref, work()))
    (_, _, timeout_s), *_ = triton.calls
    assert 3.5 < timeout_s < 4.05, timeout_s


def test_the_gateway_sends_the_given_time_as_tritons_timeout_not_its_own():
    async def run() -> bytes:
        async with StandIn(ok) as stand_in:
            # 60 s is the gateway's timeout for management calls; inference gets 2.5 s.
            gateway = TritonGateway("127.0.0.1:1", f"http://127.0.0.1:{stand_in.port}", 60.0)
            try:
                inputs = {"input_ids": np.ones((1, 2), np.int64)}
                await gateway.infer("m", inputs, ["embedding"], timeout_s=2.5)
            finally:
                await gateway.close()
            headers, body = stand_in.requests[0]
            return body[: int(headers["inference-header-content-length"])]

    header = json.loads(asyncio.run(run()))
    assert header["parameters"]["timeout"] == 2_500_000


def test_the_gateway_gives_up_on_a_reply_when_the_time_is_over():
    async def run() -> float:
        async with StandIn(ok, delay_s=5.0) as stand_in:
            gateway = TritonGateway("127.0.0.1:1", f"http://127.0.0.1:{stand_in.port}", 60.0)
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                inputs = {"input_ids": np.ones((1, 2), np.int64)}
                with pytest.raises(DeadlineExceeded):
                    await gateway.infer("m", inputs, ["embedding"], timeout_s=0.3)
            finally:
                await gateway.close()
            return loop.time() - started

    assert asyncio.run(run()) < 2.0
