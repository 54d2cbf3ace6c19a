"""batch-pipeline: the engine behind the Dagster code location.

Plain Python, importable without Dagster: sources, chunking, planning, inference, landing
and the tracking store. Only `batch_pipeline.definitions` assembles the Dagster objects.
"""

import os

# Nothing may download model weights at run time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__version__ = "0.1.0"
