"""The scoring resource: which executor scores (query, document) pairs in a Dagster run (the
related documents' reranker, a cross-encoder or the chat-model judge), as `--executor` chooses
it for `batch-pipeline run --kind related`."""

import dagster as dg
from pydantic import Field

from batch_pipeline.executors.registry import SCORE
from resources.batch_api import BatchApiResource


class ScoringResource(BatchApiResource):
    """The score family's executor and the settings it runs on. `executor` and the Batch API
    fields come from `BATCH_PIPELINE_SCORING_<FIELD>` in the shipped definitions."""

    executor: str = Field(
        default="local",
        description="What scores the plan's pairs: local (this process: the cross-encoder on "
        "torch, or the judge on vLLM), vllm (vLLM's engine in this process), vllm-run-batch "
        "(vLLM's own run-batch over the plan's batch files, in a subprocess) or openai-batch "
        "(the judge's chat completions through an OpenAI-compatible Batch API at api_base).",
    )
    device: str = Field(default="auto", description="auto, cuda, cuda:N, mps or cpu.")
    dtype: str = Field(default="auto", description="auto, float32, float16 or bfloat16.")

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.check_executor(SCORE)
