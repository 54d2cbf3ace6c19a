"""The run frame every product's partition runs in: five stages under the partition's lease,
and a landing that records the run.

- `StagedPartition` is one partition of a product as the frame runs it. Its `run` takes the
  partition's run lease (a second run of the partition waits, then finds only what is still
  stale) and runs collect -> prepare -> plan -> execute -> land. Plan and execute are the
  frame's own, through the partition's `executor` (embedding or generation, see
  `batch_pipeline.executors`); a product writes collect, prepare and land.
- `landing` is the land stage's frame, and only the frame opens it (`StagedPartition.land_stage`
  calls the product's `land` inside it). On entry it takes the generation's landing lease,
  reads the table's version and records the run's start (so a run that dies after a commit is
  known). The product's land does its own work inside, asks the run's mass-deletion guard
  before it deletes (`LandedRun.hold_deletions`), and reports a `RunOutcome`, whose `deleted`
  the frame holds against what the guard cleared. On exit it gathers every stage's seconds,
  builds the run's measures, writes its typed `RunRecord`, drops the checkpoints the run has
  landed and prunes old stage files. The land hands on a `Landing`: the product's summary and
  the frame's record of the run (its measures and what the guard held back), which the assets
  and the commands read.

A product brings its stages and its counts; nothing here knows documents from tickets.

- `request`: what a run is asked to do (`RunRequest`) and what a stage hands on
  (`StageOutput`);
- `landing`: the land stage's frame (`landing`, the deletion guard, the run's record);
- `partition`: `StagedPartition`, the five stages under the lease, and `ProductPartition`,
  a partition of a product with one generation over all its partitions.
"""
