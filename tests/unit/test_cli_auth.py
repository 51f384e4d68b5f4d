"""The CLI sends EMBED_API_KEY to the server, checked against a local HTTP server that
records the headers it receives."""

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from embed_server.__main__ import main


class Recorder(BaseHTTPRequestHandler):
    seen: list[dict[str, str]] = []

    def do_GET(self) -> None:
        Recorder.seen.append(dict(self.headers))
        body = json.dumps({"models": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server_url() -> Iterator[str]:
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_cli_sends_the_api_key_as_a_bearer_token(server_url, monkeypatch, capsys):
    monkeypatch.setenv("EMBED_API_KEY", "cli-secret")
    assert main(["models", "--url", server_url]) == 0
    assert Recorder.seen[0]["Authorization"] == "Bearer cli-secret"
    assert "no models" in capsys.readouterr().out


def test_the_cli_sends_no_authorization_without_a_key(server_url, monkeypatch):
    monkeypatch.delenv("EMBED_API_KEY", raising=False)
    assert main(["models", "--url", server_url]) == 0
    assert "Authorization" not in Recorder.seen[0]
