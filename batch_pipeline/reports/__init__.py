"""What `batch-pipeline status` and `doctor` report, one module per product: the vector index
of a collection (`collection`) and the ticket intents (`tickets`); `text` lays reports out for
a terminal. Each report is a dict (its `--json` form) with the product's `product` name and
`kind`; each module also gives its reports' text lines."""
