"""The reranker on vLLM's offline engine in the run's process: the cross-encoder folder as a
pooling model (`LLM(model=folder, runner="pooling")`), a batch of pairs scored by
`LLM.score`, one query at a time with its documents. The batches are every scorer's
(`inference.scorer.BatchedScorer`); the engine is started once, on first use, with the
embedding engines' settings (`inference.vllm_embedder.EmbedEngineSettings`)."""

import time
from itertools import groupby

import numpy as np

from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.rerankers import RerankerNotAvailableError, ResolvedReranker
from batch_pipeline.inference.scorer import BatchedScorer, Pair
from batch_pipeline.inference.vllm_embedder import (
    EmbedEngineSettings,
    embed_engine_settings,
    start_pooling_engine,
)


class VllmScorer(BatchedScorer):
    """Scores pairs with `LLM.score` (see the module docstring)."""

    backend = "vllm"

    def __init__(
        self,
        reranker: ResolvedReranker,
        settings: EmbedEngineSettings | None = None,
        plan: PlanSettings | None = None,
    ) -> None:
        super().__init__(reranker, plan)
        self.engine_settings = settings or embed_engine_settings("cpu", "auto")
        self.device = self.engine_settings.device
        self._llm = None

    def engine(self):  # noqa: ANN201 - vllm.LLM
        if self._llm is None:
            started = time.perf_counter()
            self._llm = start_pooling_engine(
                self.reranker.path,
                "the reranker",
                self.engine_settings,
                self.reranker.max_length,
                RerankerNotAvailableError,
            )
            self.load_seconds = time.perf_counter() - started
        return self._llm

    def score_batch(self, pairs: list[Pair]) -> np.ndarray:
        llm = self.engine()
        scores: list[float] = []
        # a pair past the model's length is cut as the in-process scorer cuts it
        cut = {"truncation": "longest_first", "max_length": self.reranker.max_length}
        # a batch is sorted by length, not by query: each run of one query is one call
        for query, run in groupby(pairs, key=lambda pair: pair[0]):
            documents = [document for _, document in run]
            found = llm.score(query, documents, use_tqdm=False, tokenization_kwargs=cut)
            scores += [float(output.outputs.score) for output in found]
        return np.asarray(scores, dtype=np.float32)
