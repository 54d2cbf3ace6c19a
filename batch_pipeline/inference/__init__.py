"""Running the model: finding it on disk (`models`), its fingerprint, batching under a
token budget, the `Embedder` protocol, the real runner and a FAKE embedder for tests."""
