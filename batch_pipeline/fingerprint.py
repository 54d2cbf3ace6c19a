"""The model fingerprint: one short hash of everything that changes a vector.

It covers the model (name, weights and config files, normalisation, max sequence length,
document prefix) and the collection's chunking settings. It is part of every chunk's
staleness key, so changing any of these re-embeds what they affect.
"""

import hashlib
import json

from batch_pipeline.config import ChunkingConfig
from batch_pipeline.models import ResolvedModel


def model_fingerprint(model: ResolvedModel, chunking: ChunkingConfig) -> str:
    payload = {"model": model.identity(), "chunking": chunking.model_dump(mode="json")}
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def staleness_key(input_hash: str, fingerprint: str) -> str:
    """A chunk is re-embedded if and only if this key changed."""
    return hashlib.sha256(f"{input_hash}:{fingerprint}".encode()).hexdigest()


def generation_index(collection: str, fingerprint: str) -> str:
    """The table and tracking key of one collection's generation (one fingerprint)."""
    return f"{collection}__{fingerprint}"


def shard_of(doc_id: str, shards: int) -> int:
    """The shard a document belongs to: a stable hash of its id (the same on every machine)."""
    return int(hashlib.sha1(doc_id.encode("utf-8")).hexdigest()[:8], 16) % shards
