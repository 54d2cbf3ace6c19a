"""Thin Dagster resources over the engine in `batch_pipeline`, and which one chooses each
model family's executor (`FAMILY_RESOURCES`)."""

from batch_pipeline.executors.registry import EMBED, GENERATE, SCORE
from resources.generation import GenerationResource
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource
from resources.scoring import ScoringResource

# the resource whose `executor` field chooses what runs a model family's plans in Dagster
FAMILY_RESOURCES = {EMBED: "inference", GENERATE: "generation", SCORE: "scoring"}

__all__ = [
    "FAMILY_RESOURCES",
    "GenerationResource",
    "InferenceResource",
    "PipelineResource",
    "ScoringResource",
]
