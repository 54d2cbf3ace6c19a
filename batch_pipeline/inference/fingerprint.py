"""Generation fingerprints: one short hash of everything that decides a product's outputs.

`fingerprint_of` is the one hash every product's generation key is (the vector index's, the
ticket intents', the briefs'), over what that product says decides its rows. The vector
index's, `model_fingerprint`, covers the model (name, weights and config files,
normalisation, max sequence length, document prefix) and the collection's chunking settings;
it is part of every chunk's staleness key, so changing any of these re-embeds what they
affect.
"""

import hashlib
import json

from batch_pipeline.config import ChunkingConfig
from batch_pipeline.inference.models import ResolvedModel


def fingerprint_of(payload: dict) -> str:
    """16 hex digits of the SHA-256 of `payload` as canonical JSON (sorted keys)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def model_fingerprint(
    model: ResolvedModel, chunking: ChunkingConfig, served_model: str | None = None
) -> str:
    """The vector index's: the model and the chunking, and the provider's model where an
    executor embeds with another than the configured one (`EmbeddingExecutor.served_model`)."""
    payload = {"model": model.identity(), "chunking": chunking.model_dump(mode="json")}
    if served_model is not None:
        payload["served_model"] = served_model
    return fingerprint_of(payload)
