"""The lengths of one collection's documents, as a product: its fingerprint (the bucket
bounds), its generations, its rule and scorer, handed to the shared reviewer."""

import hashlib
import json
from dataclasses import dataclass

from batch_pipeline.declaration import ProductEnv
from batch_pipeline.generations.review import (
    Completeness,
    EmbedderFor,
    ReviewedGenerations,
)
from batch_pipeline.state.tracking import GenerationRecord
from tests.lengths.config import LengthsConfig
from tests.lengths.partition import LengthPartition

NAME = "lengths"
SUFFIX = "_lengths"


@dataclass(frozen=True)
class SizeRule:
    """What execute "runs": the bucket bounds (no model)."""

    name: str
    fingerprint: str


class CoversPassRule:
    """Complete when the generation buckets every document of its last full pass."""

    def assess(self, record: GenerationRecord, live: GenerationRecord | None) -> Completeness:
        key = {"rows": record.rows, "documents": record.documents, "full_pass": record.full_pass}
        if record.full_pass and record.rows >= record.documents:
            return Completeness(True, None, key)
        missing = record.documents - record.rows
        why = "no full pass yet" if not record.full_pass else f"{missing} documents unbucketed"
        return Completeness(False, f"not complete: {why}", key)


class BucketScorer:
    """Bucket accuracy on a labelled set of {doc_id, bucket}."""

    floors: dict[str, float] = {}

    def __init__(self, settings: LengthsConfig, store) -> None:  # noqa: ANN001
        self.settings, self.store = settings, store
        self.tolerance = settings.tolerance

    def _labels(self) -> dict[str, int]:
        lines = self.settings.labelled.read_text(encoding="utf-8").splitlines()
        return {r["doc_id"]: int(r["bucket"]) for r in map(json.loads, filter(None, lines))}

    def key(self, record: GenerationRecord) -> dict[str, object] | None:
        if self.settings.labelled is None or not self.store.has_table(record.index_name):
            return None
        digest = hashlib.sha256(self.settings.labelled.read_bytes()).hexdigest()[:16]
        return {"labelled": digest, "version": self.store.open(record.index_name).version}

    def score(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict[str, float]:
        labels = self._labels()
        rows = self.store.scan(record.index_name, ["doc_id", "bucket"]).to_pylist()
        got = {r["doc_id"]: r["bucket"] for r in rows}
        right = sum(got.get(doc_id) == bucket for doc_id, bucket in labels.items())
        return {"bucket_accuracy": right / len(labels) if labels else 0.0}


class LengthProduct(ReviewedGenerations):
    def __init__(self, env: ProductEnv, collection: str) -> None:
        self.env, self.collection_name = env, collection
        self.config, self.tracking, self.store = env.config, env.tracking, env.store
        self.documents_for = env.documents_for

    @property
    def settings(self) -> LengthsConfig:
        return self.config.product_section(NAME)

    @property
    def name(self) -> str:
        return f"{self.collection_name}{SUFFIX}"

    def generation_config(self) -> dict:
        return {"buckets": self.settings.buckets, "rule": "bytes-v1"}

    @property
    def model(self) -> SizeRule:
        return SizeRule("size-buckets", self.fingerprint)

    def partition(self, key: str) -> LengthPartition:
        return LengthPartition(self, key)

    # its generations: the frame's reviewer, with its rule and scorer
    def completeness_rule(self) -> CoversPassRule:
        return CoversPassRule()

    def scorer(self) -> "BucketScorer | None":
        return BucketScorer(self.settings, self.store) if self.settings.labelled else None

    @property
    def no_live_hint(self) -> str:
        return (
            f"run it first (batch-pipeline run --collection {self.collection_name} --kind {NAME})"
        )
