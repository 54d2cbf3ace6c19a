"""The measures batch inference is judged by, per run and per partition: throughput, cost
per 1,000 inputs, wall-clock against the run's window, failure and retry rate, completeness;
the progress of a long stage; the report that lists them (`batch-pipeline report`); and the
peak memory the benchmarks report (`memory`)."""
