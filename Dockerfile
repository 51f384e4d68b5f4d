# GPU image: NVIDIA's Triton (native ONNX Runtime backend, CUDA) plus this API.
#   docker build -t embed-server .
#   export EMBED_API_KEY="$(openssl rand -hex 32)"   # keep it: clients need it
#   docker run --gpus all -p 8686:8686 -e EMBED_API_KEY \
#     -v $PWD/model_repository:/app/model_repository embed-server
# The API listens on every interface of the container, so it refuses to start without
# EMBED_API_KEY (model management then needs "Authorization: Bearer <key>"). Triton stays on
# the container's loopback: its repository API can load and run code, and only the API's
# port is published.
FROM nvcr.io/nvidia/tritonserver:24.10-py3

WORKDIR /app
COPY requirements.txt .
RUN python3 -m pip install --no-cache-dir -r requirements.txt

COPY . .
# The project's Python ONNX Runtime runner, for configs generated with EMBED_TRITON_BACKEND=python.
RUN mkdir -p /opt/tritonserver/backends/onnxruntime_python \
 && cp embed_server/runner/model.py /opt/tritonserver/backends/onnxruntime_python/model.py

ENV EMBED_HOST=0.0.0.0 \
    EMBED_PORT=8686 \
    EMBED_TRITON_HOST=127.0.0.1 \
    EMBED_TRITON_BACKEND=auto \
    EMBED_INSTANCE_KIND=auto \
    PYTHON=python3
EXPOSE 8686
# The supervisor starts Triton (restarting it if it dies), then the API; SIGTERM stops both.
CMD ["python3", "-m", "embed_server", "serve"]
