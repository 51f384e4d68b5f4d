"""The inference client against a stand-in for Triton's HTTP endpoint on 127.0.0.1.

The stand-in speaks the binary tensor extension as Triton does (checked against a real
Triton by the integration suite); here it lets connection failures be staged on purpose.
"""

import asyncio
import json

import numpy as np
import pytest

from embed_server.errors import BadRequest, DeadlineExceeded, ModelNotFound, Overloaded
from embed_server.triton import TritonGateway
from embed_server.triton_http import (
    ConnectionFailed,
    HttpConnectionPool,
    HttpReply,
    decode_infer_response,
    encode_infer_request,
)


def triton_reply(arrays: dict[str, np.ndarray]) -> bytes:
    dtypes = {np.dtype(np.float32): "FP32", np.dtype(np.int64): "INT64"}
    outputs = [
        {
            "name": name,
            "datatype": dtypes[a.dtype],
            "shape": list(a.shape),
            "parameters": {"binary_data_size": a.nbytes},
        }
        for name, a in arrays.items()
    ]
    header = json.dumps({"model_name": "m", "outputs": outputs}).encode()
    body = header + b"".join(a.tobytes() for a in arrays.values())
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
        % (len(header), len(body), body)
    )


def error_reply(status: int, message: str) -> bytes:
    body = json.dumps({"error": message}).encode()
    return b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body)


class StandIn:
    """Answers each request with ``answer(n)`` for the n-th request it receives."""

    def __init__(self, answer, delay_s=0.0, close_after_reply=False):
        self.answer = answer
        self.delay_s = delay_s
        self.close_after_reply = close_after_reply
        self.connections = 0
        self.requests: list[tuple[dict[str, str], bytes]] = []

    async def handle(self, reader, writer):
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")[1:]
                pairs = (line.partition(":") for line in lines)
                headers = {k.strip().lower(): v.strip() for k, _, v in pairs if k}
                body = await reader.readexactly(int(headers["content-length"]))
                self.requests.append((headers, body))
                index = len(self.requests) - 1
                await asyncio.sleep(self.delay_s if index == 0 else 0)
                writer.write(self.answer(index))
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    async def __aenter__(self):
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()


def ok(_: int) -> bytes:
    return triton_reply({"embedding": np.ones((1, 3), np.float32)})


def test_request_encoding_and_reply_decoding_keep_shapes_and_dtypes():
    ids = np.array([[101, 7, 102]], dtype=np.int64)
    body, header_length = encode_infer_request({"input_ids": ids}, ["embedding"], 5_000_000)
    header = json.loads(body[:header_length])
    assert header["inputs"][0] == {
        "name": "input_ids",
        "shape": [1, 3],
        "datatype": "INT64",
        "parameters": {"binary_data_size": 24},
    }
    assert header["parameters"] == {"timeout": 5_000_000}
    assert np.frombuffer(body[header_length:], np.int64).tolist() == [101, 7, 102]

    vectors = np.arange(6, dtype=np.float32).reshape(2, 3)
    counts = np.array([[3, 4], [4, 4]], dtype=np.int64)
    raw = triton_reply({"embedding": vectors, "token_counts": counts})
    head, _, payload = raw.partition(b"\r\n\r\n")
    length = int(head.split(b"Inference-Header-Content-Length: ")[1].split(b"\r\n")[0])
    reply = HttpReply(200, {"inference-header-content-length": str(length)}, payload)
    decoded = decode_infer_response(reply)
    assert np.array_equal(decoded["embedding"], vectors)
    assert decoded["token_counts"].dtype == np.int64
    assert np.array_equal(decoded["token_counts"], counts)


def test_a_truncated_reply_is_refused_not_misread():
    raw = triton_reply({"embedding": np.ones((1, 3), np.float32)})
    head, _, payload = raw.partition(b"\r\n\r\n")
    length = int(head.split(b"Inference-Header-Content-Length: ")[1].split(b"\r\n")[0])
    reply = HttpReply(200, {"inference-header-content-length": str(length)}, payload[:-4])
    with pytest.raises(ValueError, match="embedding"):
        decode_infer_response(reply)


def test_error_messages_are_tritons_or_the_raw_text():
    assert HttpReply(400, {}, b'{"error":"bad shape"}').error_message() == "bad shape"
    assert HttpReply(502, {}, b"gateway down").error_message() == "gateway down"
    assert HttpReply(500, {}, b"").error_message() == "HTTP 500"


def test_sequential_requests_share_one_keep_alive_connection():
    async def run():
        async with StandIn(ok) as triton:
            pool = HttpConnectionPool("127.0.0.1", triton.port)
            for _ in range(5):
                reply = await pool.post("/v2/models/m/infer", {}, b"{}")
                assert reply.status == 200
            pool.close()
            return triton.connections

    assert asyncio.run(run()) == 1


def test_a_connection_closed_while_idle_is_replaced_transparently():
    async def run():
        async with StandIn(ok, close_after_reply=True) as triton:
            pool = HttpConnectionPool("127.0.0.1", triton.port)
            statuses = []
            for _ in range(3):
                statuses.append((await pool.post("/p", {}, b"{}")).status)
                await asyncio.sleep(0.05)
            pool.close()
            return statuses, triton.connections

    statuses, connections = asyncio.run(run())
    assert statuses == [200, 200, 200]
    assert connections == 3


def test_a_cancelled_request_never_leaves_its_reply_for_the_next_one():
    def answer(index: int) -> bytes:
        value = np.full((1, 3), index, np.float32)
        return triton_reply({"embedding": value})

    async def run():
        async with StandIn(answer, delay_s=0.3) as triton:
            pool = HttpConnectionPool("127.0.0.1", triton.port)
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.05):
                    await pool.post("/p", {}, b"{}")
            reply = await pool.post("/p", {}, b"{}")
            pool.close()
            head = int(reply.headers["inference-header-content-length"])
            return np.frombuffer(reply.body[head:], np.float32).tolist(), triton.connections

    values, connections = asyncio.run(run())
    assert values == [1.0, 1.0, 1.0]
    assert connections == 2


def test_an_unreachable_server_fails_fast():
    async def run():
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        pool = HttpConnectionPool("127.0.0.1", port)
        with pytest.raises(ConnectionFailed):
            async with asyncio.timeout(5):
                await pool.post("/p", {}, b"{}")

    asyncio.run(run())


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (error_reply(404, "Request for unknown model: 'm' is not found"), ModelNotFound),
        (error_reply(503, "Exceeds maximum queue size"), Overloaded),
        (error_reply(400, "Request timeout expired"), DeadlineExceeded),
        (error_reply(400, "unexpected shape for input 'input_ids'"), BadRequest),
    ],
)
def test_the_gateway_translates_tritons_http_errors(reply, error):
    async def run():
        async with StandIn(lambda _: reply) as triton:
            gateway = TritonGateway("127.0.0.1:1", f"http://127.0.0.1:{triton.port}", 5.0)
            try:
                await gateway.infer(
                    "m", {"input_ids": np.ones((1, 2), np.int64)}, ["embedding"], timeout_s=5.0
                )
            finally:
                await gateway.close()

    with pytest.raises(error):
        asyncio.run(run())


def test_the_gateway_returns_the_requested_outputs():
    async def run():
        async with StandIn(ok) as triton:
            gateway = TritonGateway("127.0.0.1:1", f"http://127.0.0.1:{triton.port}", 5.0)
            try:
                result = await gateway.infer(
                    "a model/with slash",
                    {"input_ids": np.ones((1, 2), np.int64)},
                    ["embedding"],
                    timeout_s=5.0,
                )
            finally:
                await gateway.close()
            headers, _ = triton.requests[0]
            return result, headers

    result, headers = asyncio.run(run())
    assert result["embedding"].tolist() == [[1.0, 1.0, 1.0]]
    assert "inference-header-content-length" in headers
