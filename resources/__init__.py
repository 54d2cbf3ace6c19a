"""Thin Dagster resources over the engine in `batch_pipeline`."""

from resources.generation import GenerationResource
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource

__all__ = ["GenerationResource", "InferenceResource", "PipelineResource"]
