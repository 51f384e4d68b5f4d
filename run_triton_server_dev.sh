#!/usr/bin/env bash
# Start Triton for development on ports 8000 (HTTP), 8001 (gRPC), 8002 (metrics) with
# explicit model control over ./model_repository.
#
# Where a Docker engine answers, run the NGC Triton image on all GPUs; inside that image,
# its own server; otherwise the tritonserver binary bundled in the nvidia-pytriton wheel
# (installed by `make install`).
#
# Environment: MODEL_REPOSITORY (default ./model_repository), TRITON_HTTP_PORT,
# TRITON_GRPC_PORT, TRITON_METRICS_PORT, TRITON_IMAGE (NGC tag), PYTHON (default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")"

MODEL_REPOSITORY="$(realpath -m "${MODEL_REPOSITORY:-model_repository}")"
HTTP_PORT="${TRITON_HTTP_PORT:-8000}"
GRPC_PORT="${TRITON_GRPC_PORT:-8001}"
METRICS_PORT="${TRITON_METRICS_PORT:-8002}"
TRITON_IMAGE="${TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:24.10-py3}"
PYTHON="${PYTHON:-.venv/bin/python}"
mkdir -p "$MODEL_REPOSITORY"

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && [ "${TRITON_NO_DOCKER:-0}" != 1 ]; then
  exec docker run --rm --init --gpus all --shm-size=1g \
    -p "$HTTP_PORT:8000" -p "$GRPC_PORT:8001" -p "$METRICS_PORT:8002" \
    -v "$MODEL_REPOSITORY:/models" "$TRITON_IMAGE" \
    tritonserver --model-repository=/models --model-control-mode=explicit
fi

# Inside the NGC image (see Dockerfile) the native server and its backends are installed.
if [ -x /opt/tritonserver/bin/tritonserver ]; then
  exec /opt/tritonserver/bin/tritonserver --model-repository="$MODEL_REPOSITORY" \
    --model-control-mode=explicit --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" \
    --metrics-port="$METRICS_PORT"
fi

exec "$PYTHON" -m embed_server.triton_launcher \
  --model-repository "$MODEL_REPOSITORY" \
  --backend-directory build/triton_backends \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT"
