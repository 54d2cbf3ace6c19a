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

# The component types (`batch_pipeline.components`), for `dg` (the package is this
# distribution's `dagster_dg_cli.registry_modules` entry point) and for `type:
# batch_pipeline.BatchPipelineComponent` in a defs.yaml. Imported on first use only, so that
# the engine and the CLI load without Dagster.
COMPONENT_TYPES = ("BatchPipelineComponent",)


def __getattr__(name: str):  # noqa: ANN202
    if name in COMPONENT_TYPES:
        import importlib

        return getattr(importlib.import_module("batch_pipeline.components"), name)
    raise AttributeError(f"module 'batch_pipeline' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *COMPONENT_TYPES])
