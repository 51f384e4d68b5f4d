# GPU image: NVIDIA's Triton (native ONNX Runtime backend, CUDA) plus this API.
#   docker build -t embed-server .
#   docker run --gpus all -p 8686:8686 -v $PWD/model_repository:/app/model_repository embed-server
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
    EMBED_TRITON_BACKEND=auto \
    EMBED_INSTANCE_KIND=auto \
    PYTHON=python3
EXPOSE 8686 8000 8001 8002
# The supervisor starts Triton (restarting it if it dies), then the API; SIGTERM stops both.
CMD ["python3", "-m", "embed_server", "serve"]
