"""The model fingerprint: one short hash of everything that changes a vector.

It covers the model (name, weights and config files, normalisation, max sequence length,
document prefix) and the collection's chunking settings. It is part of every chunk's
staleness key, so changing any of these re-embeds what they affect.
"""

import hashlib
import json

from batch_pipeline.config import ChunkingConfig
from batch_pipeline.inference.models import ResolvedModel


def model_fingerprint(model: ResolvedModel, chunking: ChunkingConfig) -> str:
    payload = {"model": model.identity(), "chunking": chunking.model_dump(mode="json")}
    blob = json.dumps(payload, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
