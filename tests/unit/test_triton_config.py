from converters.triton_config import DeploymentOptions, ModelSignature, TensorSpec, render_config

SIGNATURE = ModelSignature(
    inputs=[
        TensorSpec("input_ids", "int64", (-1,), ragged=True),
        TensorSpec("attention_mask", "int64", (-1,), ragged=True),
    ],
    outputs=[TensorSpec("embedding", "float32", (384,))],
    warmup_dims={"input_ids": (16,), "attention_mask": (16,)},
)


def test_python_runner_config_batches_ragged_inputs():
    text = render_config(
        "m", SIGNATURE, DeploymentOptions(max_batch_size=48, max_queue_delay_us=500)
    )
    assert 'backend: "onnxruntime_python"' in text
    assert "max_batch_size: 48" in text
    assert "max_queue_delay_microseconds: 500" in text
    assert text.count("allow_ragged_batch: true") == 2
    assert "kind: KIND_CPU" in text
    assert "model_warmup" in text and "dims: [ 16 ]" in text
    assert 'key: "padding_efficiency"' in text


def test_queue_policy_rejects_instead_of_queueing_forever():
    text = render_config("m", SIGNATURE, DeploymentOptions(max_queue_size=7, queue_timeout_us=900))
    assert "timeout_action: REJECT" in text
    assert "max_queue_size: 7" in text
    assert "default_timeout_microseconds: 900" in text


def test_native_backend_config_has_no_ragged_inputs_and_uses_gpu():
    options = DeploymentOptions(
        backend="onnxruntime",
        instance_kind="gpu",
        instance_count=2,
        intra_op_threads=4,
        warmup=False,
    )
    text = render_config("m", SIGNATURE, options)
    assert 'platform: "onnxruntime_onnx"' in text
    assert "allow_ragged_batch" not in text
    assert "kind: KIND_GPU" in text and "count: 2" in text
    assert 'key: "intra_op_thread_count"' in text
    assert "model_warmup" not in text


def test_lone_text_spinning_is_on_by_default_and_can_be_turned_off():
    assert 'key: "single_text_spinning"\n  value: { string_value: "1" }' in render_config(
        "m", SIGNATURE, DeploymentOptions()
    )
    off = render_config("m", SIGNATURE, DeploymentOptions(single_text_spinning=False))
    assert 'key: "single_text_spinning"\n  value: { string_value: "0" }' in off
