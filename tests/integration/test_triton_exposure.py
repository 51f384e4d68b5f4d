"""Triton's own API (its repository API can load and run code) is not reachable from other
machines: by default the tritonserver the README's way starts listens on loopback only."""

from __future__ import annotations

import psutil
import pytest

from tests.conftest import RunningServer

pytestmark = pytest.mark.integration

# gRPC listens on an IPv6 socket: loopback shows as the IPv4-mapped address.
LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}


def tritonserver_of(server: RunningServer) -> psutil.Process:
    for child in psutil.Process(server.process.pid).children(recursive=True):
        if child.name() == "tritonserver":
            return child
    raise AssertionError("no tritonserver among the server's processes")


def test_triton_listens_on_loopback_only(server):
    triton = tritonserver_of(server)
    listening = {
        (connection.laddr.ip, connection.laddr.port)
        for connection in triton.net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN
    }
    ports = {server.triton_http_port, server.triton_grpc_port, server.triton_metrics_port}
    assert ports <= {port for _, port in listening}, listening
    assert {address for address, _ in listening} <= LOOPBACK, listening
