"""Where the pipeline keeps state: storage locations, stage files (staging), spill buckets,
the tracking store and its landing lease, the LanceDB vector store, and reconciliation of
the two."""
