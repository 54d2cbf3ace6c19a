"""Rerankers, the score family's models: a cross-encoder folder (a Hugging Face sequence
classifier with one label, as sentence-transformers' `CrossEncoder` saves it) read the way
the other models are: from a local folder, never downloaded, fingerprinted over its files,
with its limits read from its config.

No reranker's weights install from the package registries. `build_test_cross_encoder` makes
a real cross-encoder for TESTS ONLY: an encoder's weights (the shipped all-MiniLM-L6-v2)
under a freshly initialised one-label head, seeded: its architecture, tokenizer and pair
encoding are a reranker's, so every engine runs it as one, but its scores mean nothing.
"""

import json
from dataclasses import dataclass
from pathlib import Path

from batch_pipeline.inference.models import files_hash

SEQUENCE_CLASSIFIER = "ForSequenceClassification"  # the architecture's suffix
MAX_PAIR_TOKENS = 512  # a pair is cut to this, or to the model's own limit if lower


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
    config_file = path / "config.json"
    if not config_file.is_file():
        raise RerankerNotAvailableError(
            f"reranker {path}: no config.json there (give the folder a cross-encoder was "
            "saved to, e.g. by sentence-transformers' CrossEncoder.save)"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as error:
        raise RerankerNotAvailableError(f"reranker {path}: config.json: {error}") from None
    architectures = config.get("architectures") or []
    if not any(str(a).endswith(SEQUENCE_CLASSIFIER) for a in architectures):
        raise RerankerNotAvailableError(
            f"reranker {path}: {', '.join(map(str, architectures)) or 'no architecture'} is not "
            f"a sequence classifier (a cross-encoder is *{SEQUENCE_CLASSIFIER})"
        )
    labels = len(config.get("id2label") or {}) or int(config.get("num_labels") or 1)
    if labels != 1:
        raise RerankerNotAvailableError(
            f"reranker {path}: it has {labels} labels; a reranker scores a pair with one"
        )
    limit = int(config.get("max_position_embeddings") or MAX_PAIR_TOKENS)
    return ResolvedReranker(path.name, path, files_hash(path), min(limit, MAX_PAIR_TOKENS))


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
