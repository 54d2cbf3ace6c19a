"""A planned batch made ready for a sentence-transformers model: its carried token ids padded
into the features the model's tokenizer would give (checked once per runner against that
tokenizer), or its texts tokenised; on CUDA in pinned memory. The next batches are made ready
on a worker thread behind a bounded queue, overlapping the runner's forward passes.

This module needs torch only (no dagster, no lancedb), as the runner does.
"""

import logging
import queue
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from batch_pipeline.inference.embedder import PlannedBatch
from batch_pipeline.inference.models import ResolvedModel

logger = logging.getLogger(__name__)


def same_features(a: dict, b: dict) -> bool:
    """Whether two batches of model features are equal, key by key and value by value."""
    import torch

    return a.keys() == b.keys() and all(
        torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a
    )


class BatchFeatures:
    """How one loaded model's batches are made ready (see the module docstring)."""

    def __init__(self, model, resolved: ResolvedModel, device: str) -> None:  # noqa: ANN001
        self.model = model  # the sentence-transformers model
        self.resolved = resolved
        self.device = device
        # do padded carried token ids equal what this model's tokenizer gives? None: not yet
        # checked (the first batch that carries them is); False: tokenise every batch
        self.carried_ids: bool | None = None

    def tokenize(self, texts: list[str]) -> dict:
        return self.placed(self.model.preprocess(texts))

    def placed(self, features: dict) -> dict:
        """On CUDA, the tensors in pinned memory, so their copies to the device overlap."""
        if self.device.startswith("cuda"):
            features = {
                k: v.pin_memory() if hasattr(v, "pin_memory") else v for k, v in features.items()
            }
        return features

    def padded(self, token_ids: Sequence[Sequence[int]]) -> dict:
        """Token ids padded into the features the model's tokenizer gives a batch: input ids
        and attention mask on its padding side, token type ids (zeros, one text per input)
        where it gives them, and the non-tensor entries sentence-transformers adds."""
        import torch

        tokenizer = self.model.tokenizer
        longest = max(len(ids) for ids in token_ids)
        input_ids = np.full((len(token_ids), longest), tokenizer.pad_token_id or 0, np.int64)
        mask = np.zeros_like(input_ids)
        left = tokenizer.padding_side == "left"
        for row, ids in enumerate(token_ids):
            span = slice(longest - len(ids), None) if left else slice(0, len(ids))
            input_ids[row, span] = ids
            mask[row, span] = 1
        features = {
            "input_ids": torch.from_numpy(input_ids),
            "attention_mask": torch.from_numpy(mask),
        }
        if "token_type_ids" in tokenizer.model_input_names:
            features["token_type_ids"] = torch.zeros_like(features["input_ids"])
        return {**self.extras, **features}

    @cached_property
    def extras(self) -> dict:
        """What the model's preprocessing adds beside tensors (sentence-transformers names
        the modality), taken once from a tokenised example."""
        example = self.model.preprocess(["an example"])
        return {k: v for k, v in example.items() if not hasattr(v, "shape")}

    def features(
        self, texts: list[str], token_ids: Sequence[Sequence[int]] | None
    ) -> tuple[dict, bool]:
        """A batch's model features, and whether its texts were tokenised for them. Carried
        token ids are padded, unless one is over the model's sequence limit (the tokenizer
        cuts it as the model expects) or the first check found that this model's tokenizer
        reads the texts otherwise (its sentence-transformers settings, say)."""
        limit = self.resolved.max_seq_length
        if (
            token_ids is None
            or self.carried_ids is False
            or any(len(ids) > limit for ids in token_ids)
        ):
            return self.tokenize(texts), True
        padded = self.padded(token_ids)
        if self.carried_ids is None:  # once per runner: do they equal what it would feed?
            tokenized = self.model.preprocess(texts)
            self.carried_ids = same_features(padded, tokenized)
            if not self.carried_ids:
                logger.warning(
                    "the token ids carried from prepare differ from what model %r's own "
                    "tokenizer gives the same texts; execute tokenises every input instead",
                    self.resolved.name,
                )
                return self.placed(tokenized), True
        return self.placed(padded), False

    def prefetched(self, batches: Iterable[PlannedBatch], depth: int) -> Iterator["Prepared"]:
        """Make upcoming batches ready (padded or tokenised) on a worker thread, at most
        `depth` ahead."""
        out: queue.Queue = queue.Queue(maxsize=depth)
        stop = threading.Event()
        done = object()

        def worker() -> None:
            try:
                for positions, texts, *carried in batches:
                    if stop.is_set():
                        return
                    ids = carried[0] if carried else None
                    out.put(Prepared.made(self, positions, texts, ids))
                out.put(done)
            except BaseException as error:  # noqa: BLE001 - re-raised in the consumer
                out.put(error)

        thread = threading.Thread(target=worker, name="batch-features", daemon=True)
        thread.start()
        try:
            while True:
                item = out.get()
                if item is done:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            stop.set()
            while thread.is_alive():
                try:
                    out.get_nowait()
                except queue.Empty:
                    thread.join(timeout=0.05)


@dataclass
class Prepared:
    """A batch made ready: its positions, texts and model features."""

    positions: list[int]
    texts: list[str]
    features: dict
    token_ids: Sequence[Sequence[int]] | None = None  # carried from the plan, if it had them
    tokenized: bool = True  # whether the features were tokenised here (not padded ids)

    def part(self, made_by: BatchFeatures, rows: slice) -> "Prepared":
        """Some of the batch's inputs, made ready as the batch was."""
        ids = None if self.token_ids is None else self.token_ids[rows]
        return Prepared.made(made_by, self.positions[rows], self.texts[rows], ids)

    @classmethod
    def made(
        cls,
        made_by: BatchFeatures,
        positions: list[int],
        texts: list[str],
        token_ids: Sequence[Sequence[int]] | None,
    ) -> "Prepared":
        """A batch made ready by `made_by`: its carried token ids padded, or its texts
        tokenised (`BatchFeatures.features`)."""
        features, tokenized = made_by.features(texts, token_ids)
        return cls(positions, texts, features, token_ids, tokenized)
