from pathlib import Path

from embed_server.settings import DEFAULT_MODEL, Settings
from embed_server.statistics import model_stats


def test_default_models_from_environment(monkeypatch):
    assert Settings().default_models == [DEFAULT_MODEL]
    monkeypatch.setenv("EMBED_DEFAULT_MODELS", "")
    assert Settings().default_models == []
    monkeypatch.setenv("EMBED_DEFAULT_MODELS", "a/b, c/d")
    assert Settings().default_models == ["a/b", "c/d"]


def test_local_model_dirs_are_colon_separated(monkeypatch):
    monkeypatch.setenv("EMBED_LOCAL_MODEL_DIRS", "/models:/data/more")
    assert Settings().local_model_dirs == [Path("/models"), Path("/data/more")]


def test_backend_auto_picks_native_only_where_triton_has_it(tmp_path):
    assert Settings(triton_backends_dir=tmp_path).resolved_backend() == "python"
    (tmp_path / "onnxruntime").mkdir()
    assert Settings(triton_backends_dir=tmp_path).resolved_backend() == "onnxruntime"


def test_instance_count_auto_is_two_on_cpu_one_per_gpu():
    assert Settings(instance_kind="cpu").resolved_instance_count() == 2
    assert Settings(instance_kind="gpu").resolved_instance_count() == 1
    assert Settings(instance_kind="cpu", instance_count=3).resolved_instance_count() == 3


def test_statistics_are_numbers_with_every_key():
    raw = [
        {
            "name": "m",
            "version": "1",
            "inference_stats": {"success": {"count": "3", "ns": "90"}},
            "batch_stats": [{"batch_size": "2", "compute_infer": {"count": "1", "ns": "5"}}],
        }
    ]
    (stat,) = model_stats(raw)
    assert stat["inference_stats"]["success"] == {"count": 3, "ns": 90}
    assert stat["inference_stats"]["cache_miss"] == {"count": 0, "ns": 0}
    assert stat["batch_stats"][0]["batch_size"] == 2
    assert stat["batch_stats"][0]["compute_input"] == {"count": 0, "ns": 0}


def test_inference_url_follows_the_grpc_host_unless_given():
    assert Settings().resolved_triton_http_url() == "http://127.0.0.1:8000"
    remote = Settings(triton_grpc_url="triton:9001", triton_http_port=9000)
    assert remote.resolved_triton_http_url() == "http://triton:9000"
    given = Settings(triton_http_url="http://other:1234")
    assert given.resolved_triton_http_url() == "http://other:1234"


def test_the_api_reaches_triton_where_triton_binds():
    """A wildcard bind is reached on loopback; a specific address on that address."""
    assert Settings(triton_host="0.0.0.0").resolved_triton_metrics_url() == (
        "http://127.0.0.1:8002/metrics"
    )
    assert Settings(triton_host="10.1.2.3").triton_connect_host() == "10.1.2.3"
    assert Settings(triton_host="fd00::5").triton_connect_host() == "[fd00::5]"
    assert Settings().resolved_triton_metrics_url() == "http://127.0.0.1:8002/metrics"
