"""The vector index's sections: a collection (its source, chunking, metadata fields,
evaluation set, shards and briefs)."""

import json
import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from batch_pipeline.config.base import (
    _existing_file,
    _relative_to_config,
    _Strict,
)
from batch_pipeline.config.briefs import BriefsConfig
from batch_pipeline.config.files import weight_names
from batch_pipeline.config.related import RelatedConfig
from batch_pipeline.config.sources import SourceConfig
from batch_pipeline.names import shard_of, shard_partition

# Collection names become Dagster partition keys, LanceDB table names and staging folder
# names, so they are kept to a conservative identifier alphabet.
COLLECTION_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class ChunkingConfig(_Strict):
    """How a collection's documents are cut into model inputs."""

    max_tokens: int | None = Field(
        default=None,
        gt=16,
        description="Most tokens of one model input; defaults to the model's max sequence length.",
    )
    overlap_tokens: int = Field(
        default=32, ge=0, description="Tokens repeated at the start of the next chunk."
    )
    include_title: bool = Field(
        default=True, description="Prefix each input with the document title."
    )
    include_headings: bool = Field(
        default=True, description="Prefix each input with its section's heading path."
    )

    @model_validator(mode="after")
    def _overlap_below_max(self) -> "ChunkingConfig":
        if self.max_tokens is not None and self.overlap_tokens >= self.max_tokens // 2:
            raise ValueError("overlap_tokens must be less than half of max_tokens")
        return self


class EvaluationConfig(_Strict):
    """The offline evaluation gate of a collection's generations."""

    path: Path = Field(description="JSONL of {query, relevant: [doc ids]}; relative to the config.")
    k: int = Field(default=5, ge=1, description="Cut-off of recall@k and MRR@k.")
    tolerance: float = Field(
        default=0.02, ge=0, description="How much worse than live a candidate may score."
    )

    _resolve_path = field_validator("path")(_existing_file)


# Columns every generation's table has (`state.vector_store.chunk_schema`; a unit test keeps
# the two in step): declared metadata fields may not take these names.
RESERVED_COLUMNS = frozenset(
    {
        "collection",
        "partition",
        "doc_id",
        "chunk_id",
        "chunk_index",
        "title",
        "section",
        "text",
        "input_text",
        "vector",
        "input_hash",
        "model_name",
        "model_fingerprint",
        "run_id",
        "embedded_at",
        "source_version",
        "content_hash",
        "metadata",
    }
)
FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
MetadataType = Literal["string", "int", "float", "bool"]


class MetadataConfig(_Strict):
    """Document metadata carried to every row of the document (front matter, S3 object
    metadata, SQL metadata columns): declared fields become typed columns that searches can
    filter on; everything else goes into the one JSON column `metadata`."""

    fields: dict[str, MetadataType] = Field(
        default_factory=dict,
        description="Declared fields and their types (string, int, float, bool).",
    )

    @field_validator("fields")
    @classmethod
    def _safe_fields(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not FIELD_NAME_RE.match(name):
                raise ValueError(f"{name!r}: a field name is a lowercase letter then a-z, 0-9 or _")
            if name in RESERVED_COLUMNS:
                raise ValueError(f"{name!r} is a column every table already has; rename the field")
        return value


VectorIndexType = Literal["auto", "off", "IVF_PQ", "IVF_HNSW_SQ", "IVF_SQ", "IVF_FLAT"]
SearchMode = Literal["vector", "text", "hybrid"]


class VectorIndexConfig(_Strict):
    """The ANN index on a generation's vectors (cosine, as the model's unit vectors need)."""

    type: VectorIndexType = Field(
        default="auto",
        description="auto (IVF_HNSW_SQ, chosen by measurement: docs/search.md), off (every "
        "search scans), or a LanceDB index type.",
    )
    min_rows: int = Field(
        default=20_000,
        ge=256,
        description="Rows a table holds before its ANN index is built; below, a flat scan is "
        "exact and fast enough (docs/search.md: measured).",
    )
    rebuild_growth: float = Field(
        default=2.0,
        gt=1,
        description="Rebuild (retrain) the index once the table holds this many times the rows "
        "it was trained on; smaller growth is folded in incrementally.",
    )
    nprobes: int = Field(
        default=20,
        ge=1,
        description="IVF partitions a search probes: more finds more of the true nearest "
        "rows, more slowly (docs/search.md: measured).",
    )
    refine_factor: int | None = Field(
        default=4,
        ge=1,
        description="Re-rank this many times the results by their full vectors (the index "
        "keeps them quantised); none: no re-ranking.",
    )


class FullTextConfig(_Strict):
    """LanceDB's native full-text (BM25) index, one per column."""

    enabled: bool = Field(default=True, description="Build and keep the full-text indexes.")
    columns: list[Literal["text", "title"]] = Field(
        default_factory=lambda: ["text", "title"],
        min_length=1,
        description="Columns indexed: the chunk's text, and the document's title.",
    )
    base_tokenizer: Literal["simple", "whitespace", "raw"] = Field(
        default="simple", description="How text is split into words."
    )
    language: str = Field(default="English", description="Language of stemming and stop words.")
    stem: bool = Field(default=True, description="Reduce words to their stem.")
    remove_stop_words: bool = Field(default=True, description="Drop the language's stop words.")
    lower_case: bool = Field(default=True, description="Match without case.")
    ascii_folding: bool = Field(default=True, description="Match accented letters plainly.")

    def tokenizer(self) -> dict[str, object]:
        """The tokenizer settings, as LanceDB's FTS config takes them."""
        return {
            "base_tokenizer": self.base_tokenizer,
            "language": self.language,
            "stem": self.stem,
            "remove_stop_words": self.remove_stop_words,
            "lower_case": self.lower_case,
            "ascii_folding": self.ascii_folding,
        }


class IndexConfig(_Strict):
    """The indexes a collection's tables carry, kept current by every land, and how search
    ranks."""

    vector: VectorIndexConfig = VectorIndexConfig()
    full_text: FullTextConfig = FullTextConfig()
    max_unindexed_rows: int = Field(
        default=0,
        ge=0,
        description="Rows an index may lack before the indexes_current check fails (each land "
        "folds its rows in, so 0 holds unless a fold failed).",
    )
    search: SearchMode = Field(
        default="hybrid",
        description="How search ranks, and how the generation gate scores: vector, text (BM25) "
        "or hybrid (both, fused by reciprocal rank); see docs/search.md.",
    )

    @model_validator(mode="after")
    def _text_needs_its_index(self) -> "IndexConfig":
        if self.search in ("text", "hybrid") and not self.full_text.enabled:
            raise ValueError(
                f"search: {self.search} needs the full-text index; set full_text.enabled: true "
                "or search: vector"
            )
        return self


JUDGE = "judge"  # a reranker's model: the chat model as a yes/no judge
SEQUENCE_CLASSIFIER = "ForSequenceClassification"  # a cross-encoder architecture's suffix
MAX_PAIR_TOKENS = 512  # a pair is cut to this, or to the model's own limit if lower


# what a sequence classifier's head is called in the weights (BERT-like models' `classifier`,
# decoder models' `score`)
CLASSIFIER_HEADS = frozenset({"classifier", "score"})


def cross_encoder_length(folder: Path) -> int:
    """The most tokens a (query, document) pair may take in the cross-encoder at `folder`; a
    ValueError naming the folder and what is wrong where it is not one (no config.json,
    another architecture, more than one label, weights with no classifier head)."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise ValueError(
            f"reranker {folder}: no config.json there (give the folder a cross-encoder was "
            "saved to, e.g. by sentence-transformers' CrossEncoder.save)"
        )
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"reranker {folder}: config.json: {error}") from None
    architectures = config.get("architectures") or []
    if not any(str(a).endswith(SEQUENCE_CLASSIFIER) for a in architectures):
        raise ValueError(
            f"reranker {folder}: {', '.join(map(str, architectures)) or 'no architecture'} is "
            f"not a sequence classifier (a cross-encoder is *{SEQUENCE_CLASSIFIER})"
        )
    labels = len(config.get("id2label") or {}) or int(config.get("num_labels") or 1)
    if labels != 1:
        raise ValueError(
            f"reranker {folder}: it has {labels} labels; a reranker scores a pair with one"
        )
    try:
        names = weight_names(folder)
    except (OSError, ValueError) as error:
        raise ValueError(f"reranker {folder}: its weights cannot be read: {error}") from None
    if names is None:
        raise ValueError(
            f"reranker {folder}: no weights there (model.safetensors or pytorch_model.bin)"
        )
    if not any(part in CLASSIFIER_HEADS for name in names for part in name.split(".")):
        # an encoder's checkpoint under an edited config, or a damaged download: loaded, its
        # head would be drawn at random in each process, and every score would mean nothing
        raise ValueError(
            f"reranker {folder}: its weights hold no classifier head (no "
            f"{' or '.join(sorted(CLASSIFIER_HEADS))} weights); it is an encoder's checkpoint "
            "or an incomplete one, not a trained cross-encoder"
        )
    return min(int(config.get("max_position_embeddings") or MAX_PAIR_TOKENS), MAX_PAIR_TOKENS)


class RerankerConfig(_Strict):
    """A collection's reranker: it reorders hybrid search's top candidates by (query, chunk)
    scores. It is a generation of its own, reviewed on the collection's evaluation set and used
    by `search --rerank` only once it beats hybrid search alone (docs/search.md)."""

    model: str = Field(
        description="A cross-encoder folder (a one-label sequence classifier, as "
        "sentence-transformers' CrossEncoder saves it; relative to the config), or `judge`: "
        "the chat model answering yes or no."
    )
    chat_model: Path | None = Field(
        default=None,
        description="With model: judge, the chat model's folder; default the shipped one.",
    )
    candidates: int = Field(
        default=30,
        ge=10,
        le=200,
        description="Hybrid search's top rows (chunks) the reranker reorders; the review "
        "ranks their documents at 10.",
    )

    @field_validator("model")
    @classmethod
    def _cross_encoder_or_judge(cls, value: str, info: ValidationInfo) -> str:
        if value == JUDGE:
            return value
        folder = _relative_to_config(Path(value), info)
        try:
            cross_encoder_length(folder)
        except ValueError as error:
            raise ValueError(f"{error} (or `{JUDGE}`, the chat model)") from None
        return str(folder)

    _resolve_chat_model = field_validator("chat_model")(_relative_to_config)

    @model_validator(mode="after")
    def _chat_model_for_the_judge(self) -> "RerankerConfig":
        if self.chat_model is not None and self.model != JUDGE:
            raise ValueError(f"chat_model: only the {JUDGE} reranker takes a chat model")
        return self


class CollectionConfig(_Strict):
    """One collection: one Dagster partition and one LanceDB table per model generation."""

    name: str = Field(description="Partition key and table name: a-z, 0-9 and _, 63 at most.")
    source: SourceConfig
    chunking: ChunkingConfig = ChunkingConfig()
    metadata: MetadataConfig = MetadataConfig()
    evaluation: EvaluationConfig | None = None
    index: IndexConfig = IndexConfig()
    briefs: BriefsConfig | None = Field(
        default=None, description="Document briefs of this collection (a chat model's)."
    )
    reranker: RerankerConfig | None = Field(
        default=None, description="What `search --rerank` reorders hybrid search with."
    )
    related: RelatedConfig | None = Field(
        default=None, description="Each document's most related documents (a product)."
    )
    shards: int = Field(
        default=1,
        ge=1,
        le=100,
        description="Partitions <name>-s00 ... each hold the documents whose doc-id hash falls "
        "in that shard; all land into the collection's one table.",
    )

    @model_validator(mode="after")
    def _related_over_the_whole_collection(self) -> "CollectionConfig":
        if self.related is not None and self.shards > 1:
            raise ValueError(
                "related: runs over the whole collection (a list's candidates are any of its "
                "documents); a sharded collection (shards > 1) cannot have it yet"
            )
        return self

    def partition_keys(self) -> list[str]:
        """This collection's Dagster partitions: its name, or one key per shard."""
        if self.shards == 1:
            return [self.name]
        return [shard_partition(self.name, shard) for shard in range(self.shards)]

    def partition_of(self, doc_id: str) -> str:
        """The partition a document belongs to (a stable hash of its id picks the shard)."""
        if self.shards == 1:
            return self.name
        return shard_partition(self.name, shard_of(doc_id, self.shards))

    @field_validator("name")
    @classmethod
    def _safe_name(cls, value: str) -> str:
        if not COLLECTION_NAME_RE.match(value):
            raise ValueError(
                f"{value!r} is not a safe collection name: use a lowercase letter followed by "
                "lowercase letters, digits or underscores (63 characters at most)"
            )
        return value
