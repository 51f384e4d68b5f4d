"""ASGI entry point: ``uvicorn app:app --port 8686``. The wiring lives in embed_server.api."""

from embed_server.api.app import create_app

app = create_app()
