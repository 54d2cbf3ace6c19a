"""The vector index: each collection's chunks and vectors in a LanceDB table per generation.

- `product`: `IndexProduct`, a collection's index: its model, executor and generation, the
  table's indexes, and its generations' record, review, live pointer and retention;
- `partition`: `IndexPartition`, one partition's (a collection's, or one shard's) run on the
  frame: collect, prepare, land and its measures;
- `prepare`: documents normalised and chunked with the model's tokenizer, stale chunks marked;
- `land`: each affected document's rows written with their lineage (`join`: the on-disk
  join of chunks and vectors it reads through);
- `review`: its generations' completeness rule and retrieval scorer, for the shared reviewer;
- `search`: what readers ask of the live generation.

Collect is `batch_pipeline.stages.collect`, shared with the document briefs; plan and execute
are the frame's, through the embedding executor.
"""

NAME = "index"  # the kind's name (`run --kind index`)
