"""The related documents' section of a collection (`collections[].related`): how many related
documents each keeps, from how many candidates, and the links it is reviewed against."""

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from batch_pipeline.config.base import _existing_file, _Strict


class RelatedEvaluationConfig(_Strict):
    """The links a new related-documents generation is scored on, against live."""

    path: Path = Field(
        description="JSONL of {doc_id, related: [doc ids]}: the pages some documents already "
        "link as related (`python -m batch_pipeline.related.links` writes it from their "
        '"Related articles" sections); relative to the config.'
    )
    tolerance: float = Field(
        default=0.02, ge=0, description="How much lower than live a candidate's recall may be."
    )

    _resolve_path = field_validator("path")(_existing_file)


class RelatedConfig(_Strict):
    """Related documents: for every document of the collection, its `k` most related
    documents, from candidates found in the collection's live index and scored by its live
    reranker where one is promoted."""

    k: int = Field(default=5, ge=1, le=50, description="Related documents kept per document.")
    candidates: int = Field(
        default=20,
        ge=1,
        le=200,
        description="Candidates per document from the index (document vectors and BM25 on "
        "its title), scored before the best k are kept; a changed document marks its "
        "candidates' lists stale too.",
    )
    evaluation: RelatedEvaluationConfig | None = None

    @model_validator(mode="after")
    def _candidates_cover_k(self) -> "RelatedConfig":
        if self.candidates < self.k:
            raise ValueError(f"candidates ({self.candidates}) must be at least k ({self.k})")
        return self
