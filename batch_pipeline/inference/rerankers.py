"""Rerankers, the score family's models: a cross-encoder folder (a Hugging Face sequence
classifier with one label, as sentence-transformers' `CrossEncoder` saves it) read the way
the other models are: from a local folder, never downloaded, fingerprinted over its files,
with its limits read from its config.

No reranker's weights install from the package registries. `build_test_cross_encoder` makes
a real cross-encoder for TESTS ONLY: an encoder's weights (the shipped all-MiniLM-L6-v2)
under a freshly initialised one-label head, seeded: its architecture, tokenizer and pair
encoding are a reranker's, so every engine runs it as one, but its scores mean nothing.
"""

from dataclasses import dataclass
from pathlib import Path

from batch_pipeline.config.index import cross_encoder_length
from batch_pipeline.inference.models import files_hash


class RerankerNotAvailableError(RuntimeError):
    """A reranker folder that is missing or is not a one-label sequence classifier; the
    message names the folder and what is wrong."""


@dataclass(frozen=True)
class ResolvedReranker:
    """A cross-encoder on disk: its name (the folder's), its path, the hash of its files, and
    the most tokens a (query, document) pair may take."""

    name: str
    path: Path
    fingerprint: str
    max_length: int

    def identity(self) -> dict[str, object]:
        """What decides its scores: a product's generation fingerprint hashes it."""
        return {"name": self.name, "files": self.fingerprint, "max_length": self.max_length}


def resolve_reranker(folder: str | Path) -> ResolvedReranker:
    """The cross-encoder at `folder`; RerankerNotAvailableError in one line otherwise."""
    path = Path(folder).expanduser()
    try:
        length = cross_encoder_length(path)
    except ValueError as error:
        raise RerankerNotAvailableError(str(error)) from None
    return ResolvedReranker(path.name, path, files_hash(path), length)


def build_test_cross_encoder(encoder: Path, out: Path, seed: int = 0) -> Path:
    """FOR TESTS: a cross-encoder folder at `out` from `encoder`'s weights and tokenizer,
    with a seeded, untrained one-label head (see the module docstring)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.utils import logging as transformers_logging

    torch.manual_seed(seed)
    transformers_logging.disable_progress_bar()
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # the head is new by design: no load report
    try:
        model = AutoModelForSequenceClassification.from_pretrained(str(encoder), num_labels=1)
    finally:
        transformers_logging.set_verbosity(verbosity)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(encoder)).save_pretrained(str(out))
    return out
