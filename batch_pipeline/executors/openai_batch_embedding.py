"""The `openai-batch` embedding executor: the embedding plan as `/v1/embeddings` lines of
OpenAI batch files (the inputs as the plan's token ids), run by a provider's Batch API
through the driver every family shares (`executors.batch_driver`: collect, submit, wait, the
ledger, the key), and checkpointed as every embedding executor's vectors are.

The custom id is the input's staleness key, so a batch one run submitted is collected by a
later run of the same plan. The provider's model is the configured one unless `api.model`
names another; another is another generation (its name is in the index's fingerprint), sent
the inputs' text rather than token ids (its tokenizer is its own), and reviewed by the
index's gate like any generation. An input the provider has not answered yet (in flight, or
unanswered twice) is neither landed nor failed: its document stays pending for the next run.
"""

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from batch_pipeline.config import ConfigError
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.batch_api import DEVICE, NAME, window_seconds
from batch_pipeline.executors.batch_driver import kept_answers, planned_token_counts
from batch_pipeline.executors.batch_file import EMBEDDINGS, BatchResult, embedding_request_line
from batch_pipeline.executors.embedding import EmbeddingExecutor
from batch_pipeline.executors.provider_execute import FamilyBatches, ProviderExecutor
from batch_pipeline.inference.embedder import RunStats
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.execute import ExecuteSummary, embeddings_schema
from batch_pipeline.state.staging import StagePath, read_groups


@dataclass(frozen=True)
class OpenAIBatchEmbeddingExecutor(ProviderExecutor, EmbeddingExecutor):
    """Embeds through a Batch API (see the module docstring); the device and dtype are the
    provider's, so only `auto` is taken for them."""

    @classmethod
    def chosen(cls, model: ResolvedModel, choice: ExecutorChoice) -> "EmbeddingExecutor":
        return cls(model, choice.device, choice.dtype, choice.spelled, api=choice.batch_api)

    def __post_init__(self) -> None:
        if self.api is None:
            raise ConfigError(
                f"{self.spelled('api_base')}: the {NAME} executor needs the Batch API's address"
            )
        super().__post_init__()

    @property
    def served_model(self) -> str | None:
        """The provider's model where it is not the configured one: another generation."""
        return self.api.served_model(self.model.name) if self.api is not None else None

    def batches(self, planned: StagePath) -> FamilyBatches:
        """The plan's inputs as `/v1/embeddings` lines (token ids, or text for another
        model), and the answered vectors as checkpoint rows."""
        dimension = self.model.embedding_dimension
        summary = ExecuteSummary(
            RunStats(),
            DEVICE,
            "provider",
            dimension,
            backend=NAME,
            executor=NAME,
            token_prices=self.api.token_prices,
            window_seconds=window_seconds(self.api.completion_window),
        )
        planned_tokens = planned_token_counts(planned)  # where usage says nothing
        schema = embeddings_schema(dimension)
        served = self.served_model
        name = served or self.model.name

        def requests(done: set[str]) -> Iterable[dict]:
            columns = ["input_hash", "input_text", "input_ids"]
            for group in read_groups(planned, "batch_index", columns):  # streamed
                for key, text, ids in group:
                    if key not in done:  # another model tokenizes the text itself
                        given = text if served else ids
                        yield embedding_request_line(key, given, name, self.model.normalize)

        def take(answered: list[BatchResult], output: CheckpointedOutput) -> int:
            answered = [self._checked(r, name, dimension) for r in answered]
            kept, tokens = kept_answers(
                answered, lambda r: r.vector is not None, "no vector", summary, planned_tokens
            )
            if kept:
                refused = output.add(self._rows(kept, schema))
                summary.stats.inputs += len(kept) - len(refused)
                output.done_keys |= {r.key for r in kept} - refused
            return tokens

        return FamilyBatches(EMBEDDINGS, summary, set(planned_tokens), schema, requests, take)

    def _checked(self, answer: BatchResult, name: str, dimension: int) -> BatchResult:
        """`answer`, or its input's failure where its vector is not one of the model's
        width: a malformed answer, refused before any checkpoint (its document's failure,
        sent again next run), as a vector that is not finite is by the checkpoint itself."""
        vector = answer.vector
        if vector is None or (vector.ndim == 1 and len(vector) == dimension):
            return answer
        return replace(
            answer,
            vector=None,
            error=(
                f"malformed answer: a vector of {vector.size} values from the provider's "
                f"model {name}; the configured model {self.model.name} (whose tokenizer "
                f"chunks the documents) embeds into {dimension}"
            ),
        )

    def _rows(self, kept: list[BatchResult], schema: pa.Schema) -> pa.Table:
        """The answered vectors as checkpoint rows, normalised where the model normalises (a
        provider may not)."""
        vectors = np.stack([r.vector for r in kept]).astype(np.float32)
        dimension = schema.field("vector").type.list_size
        if self.model.normalize:
            with np.errstate(over="ignore", invalid="ignore"):  # not finite: the checkpoint's
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                vectors = vectors / np.where(norms > 0, norms, 1.0)
        now = datetime.now(UTC)
        return pa.table(
            {
                "input_hash": [r.key for r in kept],
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(vectors.reshape(-1), pa.float32()), dimension
                ),
                "embedded_at": pa.array([now] * len(kept), pa.timestamp("us", "UTC")),
            },
            schema=schema,
        )
