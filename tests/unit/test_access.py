"""Access control declared on the routes, checked against the app ``create_app`` builds.

The guard answers before any handler, so no Triton is needed: the app's lifespan never
runs, and the few handlers a test lets through read small stand-ins from ``app.state``.
"""

from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from embed_server.api.access import declared_access
from embed_server.api.app import create_app
from embed_server.settings import Settings

KEY = "unit-test-key"


def build(api_key_infer: bool = False) -> FastAPI:
    app = create_app(Settings(api_key=KEY, api_key_infer=api_key_infer))

    async def no_models() -> list[dict[str, object]]:
        return []

    app.state.models = SimpleNamespace(loaded_models=no_models, repository_models=no_models)
    app.state.jobs = SimpleNamespace(get=lambda job_id: None)
    app.state.triton = SimpleNamespace(last_known_ready=True)
    return app


def client(app: FastAPI) -> TestClient:
    # Not entered as a context manager: the lifespan (which connects to Triton) never runs.
    return TestClient(app, raise_server_exceptions=False)


def test_every_route_of_the_app_declares_its_access_level():
    # Included routers stay nested in app.routes: iterate the routes they contribute.
    routes = [
        context.original_route for context in iter_route_contexts(create_app(Settings()).routes)
    ]
    api_routes = [route for route in routes if isinstance(route, APIRoute)]
    assert len(api_routes) >= 17
    assert [route.path for route in api_routes if declared_access(route) is None] == []


def test_a_route_added_without_a_declaration_needs_the_key():
    app = build()

    @app.post("/reindex_everything")
    async def reindex() -> dict[str, str]:
        return {"done": "yes"}

    http = client(app)
    refused = http.post("/reindex_everything")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"
    assert "API key" in refused.json()["detail"]
    allowed = http.post("/reindex_everything", headers={"Authorization": f"Bearer {KEY}"})
    assert allowed.status_code == 200


@pytest.mark.parametrize("value", [f"bearer {KEY}", f"BEARER {KEY}", f"Bearer {KEY}"])
def test_the_bearer_scheme_is_matched_in_any_case(value):
    response = client(build()).get("/jobs/job-1", headers={"Authorization": value})
    assert response.status_code == 404, response.text  # past the guard: no such job


@pytest.mark.parametrize(
    "value", ["", KEY, f"Basic {KEY}", "Bearer wrong", "Bearer", f"Bearer {KEY}x", f"Bearer{KEY}"]
)
def test_admin_routes_refuse_a_missing_or_wrong_key(value):
    headers = {"Authorization": value} if value else {}
    http = client(build())
    for method, path in (("POST", "/unload_model"), ("POST", "/jobs/load"), ("GET", "/jobs/x")):
        assert http.request(method, path, headers=headers).status_code == 401, (path, value)


def test_listings_need_the_key_when_inference_does():
    open_app, keyed_app = client(build()), client(build(api_key_infer=True))
    for path in ("/loaded_models", "/repository_models", "/v1/models"):
        assert open_app.get(path).status_code == 200, path
        assert keyed_app.get(path).status_code == 401, path
        with_key = keyed_app.get(path, headers={"Authorization": f"Bearer {KEY}"})
        assert with_key.status_code == 200, path


def test_inference_and_metrics_need_the_key_only_when_inference_does():
    keyed_app = client(build(api_key_infer=True))
    for method, path in (("POST", "/infer"), ("POST", "/v1/embeddings"), ("GET", "/metrics")):
        assert keyed_app.request(method, path).status_code == 401, path
    # Without EMBED_API_KEY_INFER the guard lets them through to validation (422).
    assert client(build()).post("/infer", json={}).status_code == 422


def test_health_readiness_page_and_schema_stay_public():
    http = client(build(api_key_infer=True))
    assert http.get("/health").status_code == 200
    assert http.get("/dashboard").status_code == 200
    assert http.get("/openapi.json").status_code == 200
    assert http.get("/dashboard/data").status_code == 401


def test_an_unknown_path_needs_the_key_rather_than_revealing_what_exists():
    assert client(build()).get("/no/such/route").status_code == 401
