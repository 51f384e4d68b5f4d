#!/usr/bin/env bash
# Start Triton for development on ports 8000 (HTTP), 8001 (gRPC), 8002 (metrics) with
# explicit model control over ./model_repository.
#
# Where a Docker engine answers, run the NGC Triton image on all GPUs; inside that image,
# its own server; otherwise the tritonserver binary bundled in the nvidia-pytriton wheel
# (installed by `make install`).
#
# Triton's ports are reachable from this machine only (TRITON_HOST, default 127.0.0.1): its
# repository API can load and run code. Another address (a split deployment) needs
# EMBED_TRITON_API_KEY, which every Triton API but health then demands in a header.
#
# Environment: MODEL_REPOSITORY (default ./model_repository), TRITON_HOST (default
# $EMBED_TRITON_HOST, else 127.0.0.1), TRITON_HTTP_PORT, TRITON_GRPC_PORT, TRITON_METRICS_PORT,
# TRITON_IMAGE (NGC tag), PYTHON (default .venv/bin/python), EMBED_TRITON_API_KEY.
set -euo pipefail
cd "$(dirname "$0")"

MODEL_REPOSITORY="$(realpath -m "${MODEL_REPOSITORY:-model_repository}")"
HTTP_PORT="${TRITON_HTTP_PORT:-8000}"
GRPC_PORT="${TRITON_GRPC_PORT:-8001}"
METRICS_PORT="${TRITON_METRICS_PORT:-8002}"
TRITON_HOST="${TRITON_HOST:-${EMBED_TRITON_HOST:-127.0.0.1}}"
TRITON_IMAGE="${TRITON_IMAGE:-nvcr.io/nvidia/tritonserver:24.10-py3}"
PYTHON="${PYTHON:-.venv/bin/python}"
mkdir -p "$MODEL_REPOSITORY"

# RESTRICTED: the restriction flags for the NGC server (the launcher below builds its own).
# An exposed TRITON_HOST without a key makes this, and so the script, fail.
restriction_args() {
  local flags
  flags="$("$PYTHON" -m embed_server.triton_access --host "$TRITON_HOST")"
  RESTRICTED=()
  [ -z "$flags" ] || mapfile -t RESTRICTED <<<"$flags"
}

if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 && [ "${TRITON_NO_DOCKER:-0}" != 1 ]; then
  restriction_args
  # Inside the container Triton must bind every interface to be published at all; only the
  # published address (TRITON_HOST) decides who can reach it.
  PUBLISH_HOST="$TRITON_HOST"
  [[ "$PUBLISH_HOST" == *:* ]] && PUBLISH_HOST="[$PUBLISH_HOST]"
  exec docker run --rm --init --gpus all --shm-size=1g \
    -p "$PUBLISH_HOST:$HTTP_PORT:8000" -p "$PUBLISH_HOST:$GRPC_PORT:8001" \
    -p "$PUBLISH_HOST:$METRICS_PORT:8002" \
    -v "$MODEL_REPOSITORY:/models" "$TRITON_IMAGE" \
    tritonserver --model-repository=/models --model-control-mode=explicit "${RESTRICTED[@]}"
fi

# Inside the NGC image (see Dockerfile) the native server and its backends are installed.
if [ -x /opt/tritonserver/bin/tritonserver ]; then
  restriction_args
  exec /opt/tritonserver/bin/tritonserver --model-repository="$MODEL_REPOSITORY" \
    --model-control-mode=explicit --http-port="$HTTP_PORT" --grpc-port="$GRPC_PORT" \
    --metrics-port="$METRICS_PORT" --http-address="$TRITON_HOST" \
    --grpc-address="$TRITON_HOST" --metrics-address="$TRITON_HOST" "${RESTRICTED[@]}"
fi

exec "$PYTHON" -m embed_server.triton_launcher \
  --model-repository "$MODEL_REPOSITORY" \
  --backend-directory build/triton_backends --host "$TRITON_HOST" \
  --http-port "$HTTP_PORT" --grpc-port "$GRPC_PORT" --metrics-port "$METRICS_PORT"
