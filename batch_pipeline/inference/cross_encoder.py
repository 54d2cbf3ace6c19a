"""The cross-encoder scorer: a reranker folder scored in the run's process through
sentence-transformers' `CrossEncoder` (torch), batched as every scorer is
(`inference.scorer.BatchedScorer`)."""

import time

import numpy as np

from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.rerankers import ResolvedReranker
from batch_pipeline.inference.scorer import BatchedScorer, Pair
from batch_pipeline.inference.weights import every_weight_loaded


class CrossEncoderScorer(BatchedScorer):
    """The reranker in the run's process, through sentence-transformers' `CrossEncoder`."""

    backend = "sentence-transformers"

    def __init__(
        self,
        reranker: ResolvedReranker,
        device: str = "cpu",
        settings: PlanSettings | None = None,
    ) -> None:
        super().__init__(reranker, settings)
        self.device = device
        self._model = None

    def model(self):  # noqa: ANN201 - sentence_transformers.CrossEncoder
        if self._model is None:
            from sentence_transformers import CrossEncoder
            from transformers.utils import logging as transformers_logging

            transformers_logging.disable_progress_bar()  # a run prints its own progress
            started = time.perf_counter()
            with every_weight_loaded(self.reranker.path, "reranker"):
                self._model = CrossEncoder(
                    str(self.reranker.path), device=self.device, max_length=self.reranker.max_length
                )
            self.load_seconds = time.perf_counter() - started
        return self._model

    def score_batch(self, pairs: list[Pair]) -> np.ndarray:
        model = self.model()
        found = model.predict(pairs, batch_size=len(pairs), show_progress_bar=False)
        return np.asarray(found, dtype=np.float32).reshape(-1)
