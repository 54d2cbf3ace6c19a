"""How an `EmbeddingRunner` chooses `auto`'s path (backend and dtype) on its first inputs:
a median-length sample timed on every candidate, each held to its cosine floor against
torch fp32 (`inference.calibration`: the measurement, the decision and its cache), and, where
int8 may run, its calibration sample pinned from those inputs. A mixin of the runner: the
loading and the running are `inference.runner`'s.
"""

import itertools
import logging
import time
from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from batch_pipeline.inference.calibration import (
    SAMPLE_INPUTS,
    SAMPLE_TOKENS,
    Candidate,
    DtypeDecision,
    decide,
    label,
    measure,
    median_sample,
)
from batch_pipeline.inference.devices import (
    ModelLoadError,
)
from batch_pipeline.inference.openvino_backend import MIN_PINNED_INPUTS
from batch_pipeline.inference.openvino_model import (
    openvino_version,
)
from batch_pipeline.inference.quantize import CALIBRATION_INPUTS

logger = logging.getLogger("batch_pipeline.inference.runner")

CALIBRATION_HEAD = 256  # inputs read ahead to sample from when a run calibrates itself


class RunnerCalibration:
    """The runner's path choice (see the module docstring). Mixed into EmbeddingRunner,
    whose loading sets the candidates (`_candidates`), the int8 sample still to pin
    (`_unpinned`) and the decision so far (`dtype_decision`)."""

    _candidates: list[Candidate]
    _unpinned: bool
    dtype_decision: DtypeDecision | None
    calibration_seconds: float

    @property
    def calibrating(self) -> bool:
        """Whether `auto` still has a path to choose, or int8 a sample to take (on the first
        inputs it is given)."""
        return bool(self._candidates) or self._unpinned

    @property
    def pins_int8_sample(self) -> bool:
        """Whether `calibrate` may pin the int8 calibration sample from the inputs it gets."""
        return self._unpinned or ("openvino", "int8") in self._candidates

    @property
    def calibration_inputs(self) -> int:
        """How many inputs `calibrate` wants: the int8 calibration sample's size where int8
        may run (the timing sample is drawn from them), else a few batches' worth."""
        return CALIBRATION_INPUTS if self.pins_int8_sample else 4 * SAMPLE_INPUTS

    def calibrate(self, texts: list[str]) -> DtypeDecision | None:
        """Choose `auto`'s path on a median-length sample of these inputs (see
        `batch_pipeline.inference.calibration`): from the cache when this machine, these
        versions and this model were measured before. None when there is nothing to choose."""
        import torch

        if self._unpinned and texts:  # explicit int8: its model quantized on these inputs
            if not self._openvino.pin(texts):
                raise ModelLoadError(
                    f"dtype int8 has no calibration sample pinned for this model in "
                    f"{self._openvino.sample_path.parent}, and {len(texts)} inputs are too few "
                    f"to pin one (at least {MIN_PINNED_INPUTS}): run the collection first"
                )
            self._openvino_model("int8")
            self._unpinned = False
        if ("openvino", "int8") in self._candidates and texts and not self._openvino.pin(texts):
            logger.warning(
                "int8 is not measured: no calibration sample is pinned for this model in %s, "
                "and %d inputs are too few to pin one (at least %d)",
                self._openvino.sample_path.parent,
                len(texts),
                MIN_PINNED_INPUTS,
            )
            self._candidates.remove(("openvino", "int8"))
            if len(self._candidates) < 2:
                self._candidates = []
                self.dtype_decision = DtypeDecision(
                    self.dtype, "no int8 calibration sample; one path left", backend=self.backend
                )
        if not self._candidates or not texts:
            return self.dtype_decision
        default = (self.backend, self.dtype)
        about = {
            "device": self.device_name(),
            "torch": torch.__version__,
            "model": self.resolved.files_hash,
            "max_seq_length": self.resolved.max_seq_length,
            "threads": self.num_threads,
            "dtypes": [label(*c) for c in self._candidates],
        }
        uses_openvino = any(backend == "openvino" for backend, _ in self._candidates)
        if uses_openvino:
            about["openvino"] = openvino_version()
        int8 = ("openvino", "int8") in self._candidates
        if int8:  # its measurement is of the model quantized on this configuration's sample
            about["int8_sample"] = self._openvino.sample_key()
        started, exported_before = time.perf_counter(), self.export_seconds
        key = self.calibration_cache.key(**about)
        measured = self.calibration_cache.get(key, self._candidates)
        cached = measured is not None
        if measured is None:
            sample = median_sample(texts, self.token_counts(texts), budget=SAMPLE_TOKENS)
            # once: the timed calls time the model alone
            features = self.batch_features.tokenize(sample)

            def embed_as(candidate: Candidate, batch: list[str]) -> np.ndarray:
                self._use(candidate)
                return self._forward(batch, features)

            if uses_openvino:  # exported (and quantized) before the clock starts: a cost apart
                self._openvino_model("int8" if int8 else "float32")
            started = time.perf_counter()
            measured = measure(embed_as, sample, self._candidates, timer=self._timer)
            self.calibration_cache.put(key, measured, about)
            self._warm = True
        decision = decide(measured, default, self.fidelity_min_cosine, cached=cached)
        self._use(decision.candidate)
        decision = replace(
            decision,
            seconds=time.perf_counter() - started,
            export_seconds=self.export_seconds - exported_before,
        )
        self.calibration_seconds += decision.seconds
        self.dtype_decision = decision
        self._candidates = []
        return decision

    def _calibrated(
        self, batches: Iterable[tuple[list[int], list[str]]]
    ) -> Iterable[tuple[list[int], list[str]]]:
        """The batches, after calibrating on the first ones' inputs when `auto` still has
        a decision to make and no one gave it a sample (`calibrate`) before the run."""
        if not self.calibrating:
            return batches
        iterator = iter(batches)
        head: list[tuple[list[int], list[str]]] = []
        texts: list[str] = []
        for item in iterator:
            head.append(item)
            texts.extend(item[1])
            if len(texts) >= (CALIBRATION_INPUTS if self.pins_int8_sample else CALIBRATION_HEAD):
                break
        if texts:
            self.calibrate(texts)
        return itertools.chain(head, iterator)
