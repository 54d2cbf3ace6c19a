"""The five stages of a batch-inference run, and the one table that names them.

collect -> prepare -> plan -> execute -> land. Each stage is a module here; `STAGES` gives
each its name (used by the CLI, run summaries and docs), its Dagster asset, the stage file it
hands to the next stage (`<staging>/<partition>/<run_id>/<file>.parquet`) and its kinds.
Nothing else spells these names out.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str  # collect, prepare, plan, execute, land
    asset: str  # the Dagster asset that materialises it
    file: str | None  # its stage file's name (land writes the LanceDB table instead)
    kinds: frozenset[str]
    summary: str  # what it does, in one line


COLLECT = Stage(
    "collect",
    "source_documents",
    "collected",
    frozenset({"python", "parquet"}),
    "list the source, read what may have changed, classify every document",
)
PREPARE = Stage(
    "prepare",
    "document_chunks",
    "chunks",
    frozenset({"python", "parquet"}),
    "normalise and chunk new and changed documents; mark the stale chunks",
)
PLAN = Stage(
    "plan",
    "batch_plan",
    "plan",
    frozenset({"python", "parquet"}),
    "schedule every stale input once, packed into batches under a token budget",
)
EXECUTE = Stage(
    "execute",
    "chunk_embeddings",
    "embeddings",
    frozenset({"pytorch", "openvino", "parquet"}),  # the model runs on one or the other
    "run the batch plan through the model, checkpointing as it goes",
)
LAND = Stage(
    "land",
    "vector_index",
    None,
    frozenset({"lancedb"}),
    "write each affected document's rows into the generation's table, one commit per group",
)

STAGES: tuple[Stage, ...] = (COLLECT, PREPARE, PLAN, EXECUTE, LAND)
