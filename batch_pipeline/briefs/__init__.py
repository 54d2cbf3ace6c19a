"""The third batch product: document briefs, a chat model over every document of a collection.

It runs the five stages on the same frame, on the collection's partitions. Its own parts:

- `prepare`: the stale documents' prompts, rendered from the prompt file, each document cut
  at a token budget by the model's tokenizer
- `store`: the LanceDB table of one generation's briefs, one row per document, typed columns
- `land`: the valid outputs parsed into those columns, deletions applied, one commit
- `pipeline`: `BriefProduct` and `BriefPartition`, one partition's run, stage by stage

Collect is the collection's own (`source_documents`); plan and execute are the chat-model
stages `batch_pipeline.stages.prompt_plan` and `.generate`.
"""

from batch_pipeline.stages import COLLECT, Stage

NAME = "briefs"  # the kind's name (`run --kind briefs`)
# the kind whose live generation the briefs read (faithfulness, their question rows' model)
# and whose generations their question rows feed: declared, and resolved by the frame
INDEX = "index"

BRIEF_PREPARE = Stage(
    "prepare",
    "brief_prompts",
    "prompts",
    frozenset({"python", "parquet"}),
    "render the prompt of every document whose brief is stale, cut to a token budget",
)
BRIEF_PLAN = Stage(
    "plan",
    "brief_plan",
    "plan",
    frozenset({"python", "parquet"}),
    "count each prompt's tokens, refuse what does not fit, size the KV cache, chunk the work",
)
BRIEF_EXECUTE = Stage(
    "execute",
    "brief_generations",
    "generations",
    frozenset({"vllm", "parquet"}),
    "generate every planned prompt, constrained to the output schema, checkpointing chunks",
)
BRIEF_LAND = Stage(
    "land",
    "document_briefs",
    None,
    frozenset({"lancedb"}),
    "land the valid briefs as typed rows and delete the briefs of deleted documents",
)

BRIEF_STAGES: tuple[Stage, ...] = (COLLECT, BRIEF_PREPARE, BRIEF_PLAN, BRIEF_EXECUTE, BRIEF_LAND)
