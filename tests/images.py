"""Test images of every awkward kind, and a real HTTP server on 127.0.0.1 that serves them."""

from __future__ import annotations

import io
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np
from PIL import Image


def _gradient(width: int, height: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [
            x * 255 // max(width - 1, 1),
            y * 255 // max(height - 1, 1),
            (x + y) * 255 // max(width + height - 2, 1),
        ],
        axis=-1,
    )
    noise = rng.integers(0, 40, size=(height, width, 3))
    return np.clip(base + noise, 0, 255).astype(np.uint8)


def encode(image: Image.Image, fmt: str, **params) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format=fmt, **params)
    return buffer.getvalue()


def sample_images() -> dict[str, tuple[bytes, str]]:
    """name -> (bytes, content type): landscape, portrait, square, gray, RGBA, palette, CMYK."""
    rgb = Image.fromarray(_gradient(320, 200, 1))
    portrait = Image.fromarray(_gradient(150, 400, 2))
    square = Image.fromarray(_gradient(224, 224, 3))
    small = Image.fromarray(_gradient(60, 90, 4))
    gray = Image.fromarray(_gradient(300, 260, 5)[..., 0], mode="L")
    rgba_array = np.dstack(
        [_gradient(256, 300, 6), np.linspace(0, 255, 256 * 300).reshape(300, 256).astype(np.uint8)]
    )
    rgba = Image.fromarray(rgba_array, mode="RGBA")
    palette = Image.fromarray(_gradient(240, 180, 7)).convert("P", palette=Image.Palette.ADAPTIVE)
    cmyk = Image.fromarray(_gradient(280, 210, 8)).convert("CMYK")
    return {
        "landscape.jpg": (encode(rgb, "JPEG", quality=90), "image/jpeg"),
        "portrait.png": (encode(portrait, "PNG"), "image/png"),
        "square.png": (encode(square, "PNG"), "image/png"),
        "small.webp": (encode(small, "WEBP"), "image/webp"),
        "gray.png": (encode(gray, "PNG"), "image/png"),
        "rgba.png": (encode(rgba, "PNG"), "image/png"),
        "palette.gif": (encode(palette, "GIF"), "image/gif"),
        "cmyk.jpg": (encode(cmyk, "JPEG", quality=90), "image/jpeg"),
    }


def large_jpeg() -> bytes:
    return encode(Image.fromarray(_gradient(2400, 1800, 9)), "JPEG", quality=85)


def bomb_png() -> bytes:
    """Tiny file, 100 megapixels once decoded."""
    return encode(Image.new("1", (10_000, 10_000)), "PNG")


class ImageServer:
    """Serves /img/<name>, plus pages that misbehave in each way the fetcher must survive."""

    def __init__(self) -> None:
        self.images = sample_images()
        self.images["large.jpg"] = (large_jpeg(), "image/jpeg")
        self.images["bomb.png"] = (bomb_png(), "image/png")
        self.big_body = b"\xff" * 3_000_000
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: bytes, content_type: str, **headers) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in headers.items():
                    self.send_header(key.replace("_", "-"), value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                path = parts.path
                if path.startswith("/img/") and path[5:] in server.images:
                    body, kind = server.images[path[5:]]
                    return self._send(200, body, kind)
                if path == "/slow":
                    time.sleep(5)
                    return self._send(200, server.images["square.png"][0], "image/png")
                if path == "/big":
                    return self._send(200, server.big_body, "image/jpeg")
                if path == "/big-chunked":
                    self.send_response(200)
                    self.send_header("Content-Type", "image/jpeg")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for _ in range(100):
                        chunk = b"\xff" * 65536
                        try:
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                        except (BrokenPipeError, ConnectionResetError):
                            return
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if path == "/html":
                    return self._send(200, b"<html>no</html>", "text/html")
                if path == "/garbage":
                    return self._send(200, b"definitely not a png", "image/png")
                if path == "/loop":
                    return self._send(302, b"", "text/plain", Location="/loop")
                if path.startswith("/redirect/"):
                    return self._send(302, b"", "text/plain", Location=path[len("/redirect") :])
                if path == "/location":  # a redirect to ?to=..., however malformed
                    target = parse_qs(parts.query)["to"][0]
                    return self._send(302, b"", "text/plain", Location=target)
                if path == "/to-other-host":
                    port = self.server.server_address[1]
                    target = f"http://127.0.0.2:{port}/img/square.png"
                    return self._send(302, b"", "text/plain", Location=target)
                return self._send(404, b"missing", "text/plain")

        class QuietServer(ThreadingHTTPServer):
            request_queue_size = 256  # the default backlog of 5 drops bursts of connections

            def handle_error(self, request, client_address) -> None:
                pass  # clients hanging up mid-body is what the limit tests do

        self._httpd = QuietServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> ImageServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
