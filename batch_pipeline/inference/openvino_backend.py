"""The embedding runner's OpenVINO side: the model's export, and under `model.precision:
fixed_accuracy` its int8 model.

The export is read back from the export cache or made there once per machine
(`openvino_model.load_or_export`). The int8 model is that export quantized by NNCF
(`quantize.quantize_export`), calibrated on a sample of the collection's own inputs: the first
run of a model configuration in a home pins its first `CALIBRATION_INPUTS` inputs (their token
ids, in `<export cache>/int8-samples/<configuration>.npz`), and every later run, search and
evaluation of that configuration quantizes with the same sample, so the rows of a generation
come from one int8 model. The int8 model itself is cached by export and sample hash. The
pinned file carries its own hash, and is read back only where it still matches it and every
input fits the model (token ids inside its vocabulary, no input longer than its max sequence
length): a sample that cannot be read, was edited or damaged since it was pinned, or does not
fit is pinned again from the run's inputs, with a warning naming why (the int8 model changes
with it).

Each path runs one tokenised batch at a time (`OpenVinoModel`); `infer` takes the runner's
dtype: float32 or bfloat16 on the export, int8 on the quantized model.
"""

import hashlib
import logging
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from batch_pipeline.inference.calibration import CalibrationCache, cpu_model_name
from batch_pipeline.inference.models import ResolvedModel
from batch_pipeline.inference.openvino_model import OpenVinoModel, load_or_export
from batch_pipeline.inference.quantize import CALIBRATION_INPUTS, quantize_export, sample_key

logger = logging.getLogger(__name__)

SAMPLES_FOLDER = "int8-samples"  # under the export cache: one pinned sample per configuration
# fewer inputs than this are not pinned (a search's one query would otherwise calibrate the
# int8 model of every later run): int8 is then not offered until a run pins a sample
MIN_PINNED_INPUTS = 32
INT8 = "int8"
TRACE_TEXTS = ["an example input to trace the model with", "and a second"]


class OpenVinoBackend:
    """One loaded sentence-transformers model's OpenVINO paths, made on first use."""

    def __init__(
        self,
        st_model,  # noqa: ANN001 - the loaded SentenceTransformer the export is traced from
        resolved: ResolvedModel,
        tokenize: Callable[[list[str]], dict],
        token_ids: Callable[[list[str]], list[list[int]]],
        cache: Path | None,
        threads: int,
    ) -> None:
        self.st_model = st_model
        self.resolved = resolved
        self.tokenize = tokenize
        self.token_ids = token_ids
        # without a cache (a bare runner) the export goes to a folder for this machine's temp
        self.cache = cache or Path(tempfile.gettempdir()) / "batch-pipeline-openvino"
        self.threads = threads
        self.export_seconds = 0.0  # converting the model (0 when the cache had it)
        self.quantize_seconds = 0.0  # quantizing it to int8 (0 when the cache had it)
        self._export: OpenVinoModel | None = None
        self._int8: OpenVinoModel | None = None
        self._sample: list[list[int]] | None = None

    def exported(self) -> OpenVinoModel:
        """The model's OpenVINO export (raises `OpenVinoMissingError` or `ExportError`)."""
        if self._export is None:
            self._export, self.export_seconds = load_or_export(
                self.st_model,
                self.resolved,
                self.tokenize(TRACE_TEXTS),
                self.cache,
                cpu_model_name(),
                self.threads,
            )
        return self._export

    # ------------------------------------------------------------------- int8

    @property
    def sample_path(self) -> Path:
        """Where this model configuration's calibration sample is pinned."""
        configuration = CalibrationCache.key(**self.resolved.identity())
        return self.cache / SAMPLES_FOLDER / f"{configuration}.npz"

    def pin(self, texts: list[str]) -> bool:
        """Take the int8 calibration sample: the one pinned for this configuration, or else
        the first `CALIBRATION_INPUTS` of `texts`, pinned now for every later run. False when
        there is none and `texts` are too few to pin (`MIN_PINNED_INPUTS`)."""
        if self._sample is not None:
            return True
        path = self.sample_path
        if path.is_file():
            try:
                self._sample = read_sample(path, self.vocabulary, self.resolved.max_seq_length)
                return True
            except SampleError as why:
                logger.warning(
                    "the int8 calibration sample %s %s: pinning this run's first inputs "
                    "instead; the int8 model changes with it",
                    path,
                    why,
                )
        if len(texts) < MIN_PINNED_INPUTS:
            return False
        self._sample = self.token_ids(texts[:CALIBRATION_INPUTS])
        write_sample(path, self._sample)
        return True

    @property
    def vocabulary(self) -> int:
        """How many token ids the model knows (its tokenizer's, added tokens included)."""
        return len(self.st_model.tokenizer)

    def sample_features(self) -> list[dict[str, np.ndarray]]:
        """The pinned sample as model inputs, one input per entry (what the tokenizer gives
        one text alone: no padding, one segment)."""
        if self._sample is None:
            raise RuntimeError("int8 needs its calibration sample first (pin)")
        features = []
        for ids in self._sample:
            row = np.asarray([ids], dtype=np.int64)
            features.append(
                {
                    "input_ids": row,
                    "attention_mask": np.ones_like(row),
                    "token_type_ids": np.zeros_like(row),
                }
            )
        return features

    def sample_key(self) -> str | None:
        """The pinned sample's hash (None until one is pinned): what the int8 model is
        named for, and part of the calibration cache's key."""
        return None if self._sample is None else sample_key(self.sample_features())

    def int8(self) -> OpenVinoModel:
        """The export quantized to int8 on the pinned sample (made, or read back)."""
        if self._int8 is None:
            export = self.exported()
            started = time.perf_counter()
            folder = quantize_export(export.folder, self.sample_features())
            self._int8 = OpenVinoModel(folder, self.threads)
            self.quantize_seconds = time.perf_counter() - started
        return self._int8

    def infer(self, features: dict, dtype: str) -> np.ndarray:
        """Sentence embeddings of one tokenised batch: int8 runs the quantized model (its
        operations between the quantized ones in fp32), the others the export."""
        if dtype == INT8:
            return self.int8().infer(features, "float32")
        return self.exported().infer(features, dtype)


class SampleError(ValueError):
    """A pinned calibration sample that must not be used; the message says why."""


def write_sample(path: Path, sample: list[list[int]]) -> None:
    """Pin `sample` (token ids per input) at `path` with its hash, written beside it and
    moved into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in sample])
    lengths = np.asarray([len(ids) for ids in sample], dtype=np.int64)
    staging = path.with_name(f".{path.name}.tmp")
    with staging.open("wb") as handle:
        np.savez(handle, ids=ids, lengths=lengths, sha256=np.asarray(_digest(ids, lengths)))
    staging.replace(path)


def read_sample(path: Path, vocabulary: int, max_length: int) -> list[list[int]]:
    """A pinned sample, for a model of `vocabulary` token ids and `max_length` tokens an
    input; a SampleError saying why it must not be used (not a sample, changed since it was
    pinned, or not this model's inputs). A sample pinned before samples carried their hash
    is checked on the rest."""
    try:
        with np.load(path) as data:
            ids, lengths = data["ids"], data["lengths"]
            written = str(data["sha256"]) if "sha256" in data.files else None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:
        raise SampleError(f"cannot be read ({type(error).__name__})") from None
    if (
        ids.ndim != 1
        or lengths.ndim != 1
        or not len(lengths)
        or not np.issubdtype(ids.dtype, np.integer)
        or not np.issubdtype(lengths.dtype, np.integer)
        or lengths.min() < 1
        or lengths.sum() != len(ids)
    ):
        raise SampleError("is not a calibration sample")
    if written is not None and written != _digest(ids, lengths):
        raise SampleError("changed since it was pinned (damaged or edited)")
    if ids.min() < 0 or ids.max() >= vocabulary:
        raise SampleError(f"holds token ids outside the model's vocabulary of {vocabulary:,}")
    if lengths.max() > max_length:
        raise SampleError(
            f"holds an input of {int(lengths.max()):,} tokens, over the model's {max_length}"
        )
    bounds = np.cumsum(lengths)[:-1]
    return [part.tolist() for part in np.split(ids, bounds)]


def _digest(ids: np.ndarray, lengths: np.ndarray) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    digest.update(np.ascontiguousarray(lengths, dtype=np.int64).tobytes())
    return digest.hexdigest()
