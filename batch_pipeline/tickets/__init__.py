"""The second batch product: nightly ticket intent classification, one daily partition per day.

It runs the same five stages as the vector index, on the same engine. Its own parts are here:

- `exports`: reading one day's tickets from a folder, S3 or a SQL table
- `collect`: the day's tickets checked row by row (bad rows are recorded, the day still lands)
- `prepare`: each ticket's model input, cut by tokens, and whether it needs a vector
- `classifier/`: what a generation's model is and how it is made (`TicketModel`): the heads, their
  calibrated confidence, training on the labelled history, the fine-tuned encoder
- `cascade/`: the least sure tickets answered by a chat model: the threshold with its
  guarantee, asking the chat model, and a generation's cascade as the product runs it
- `intent_store`: the LanceDB table of one generation's rows, a day replaced per commit
- `land`: a day's rows classified and written, with the day's intent mix
- `evaluation` and `mix`: accuracy and macro-F1 on a labelled set; the intent mix's shift
- `review`: the generations' completeness rule and accuracy scorer
- `product`: `TicketProduct`, the product and its generations; `partition`: `DayPartition`,
  one day's run, stage by stage
- `kind` and `report`: its declaration and its reports; `arrivals`: which days the export
  sensor launches; `columns`: its stage files' columns

Plan and execute are `batch_pipeline.stages.plan` and `.execute`, unchanged; runs, failures
and generations (gate, promotion, rollback) are the tracking store's and
`batch_pipeline.generations`'.
"""

from batch_pipeline.stages import Stage

TICKET_COLLECT = Stage(
    "collect",
    "ticket_exports",
    "tickets",
    frozenset({"python", "parquet"}),
    "read the day's ticket export and check every row",
)
TICKET_PREPARE = Stage(
    "prepare",
    "ticket_inputs",
    "inputs",
    frozenset({"python", "parquet"}),
    "normalise and cut each ticket to the model input; mark those that need a vector",
)
TICKET_PLAN = Stage(
    "plan",
    "ticket_batch_plan",
    "plan",
    frozenset({"python", "parquet"}),
    "schedule every input that needs a vector once, packed under a token budget",
)
TICKET_EXECUTE = Stage(
    "execute",
    "ticket_embeddings",
    "embeddings",
    frozenset({"pytorch", "parquet"}),
    "run the batch plan through the model",
)
TICKET_LAND = Stage(
    "land",
    "ticket_intents",
    None,
    frozenset({"lancedb"}),
    "classify the day's tickets against the taxonomy and replace the day's rows in one commit",
)

TICKET_STAGES: tuple[Stage, ...] = (
    TICKET_COLLECT,
    TICKET_PREPARE,
    TICKET_PLAN,
    TICKET_EXECUTE,
    TICKET_LAND,
)
