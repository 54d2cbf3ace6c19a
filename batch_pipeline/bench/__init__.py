"""The benchmarks, each a `python -m` entry point that prints ratios against a baseline
measured in the same run:

- `python -m batch_pipeline.bench` (`embedding`): the embedding path against
  `SentenceTransformer.encode` and ONNX Runtime, with the CPU's roofline (`anchors`);
- `python -m batch_pipeline.bench.end_to_end`: prepare -> plan -> execute on the handbook,
  naming the stage that bounds the pipeline;
- `python -m batch_pipeline.bench.generation`: vLLM against transformers' static batches;
- `python -m batch_pipeline.bench.retrieval`: recall, MRR and nDCG of vector, text and hybrid
  search on the handbook and on Cranfield;
- `python -m batch_pipeline.bench.rerank`: a reranker's pairs per second in this process
  (sentence-transformers) against vLLM's `LLM.score`;
- `python -m batch_pipeline.bench.index_scale`: flat scan against the ANN index types at a
  million rows (latency, recall@10, build and fold).

Nothing here is imported at package load: the GPU check runs these where the project's other
dependencies are not installed.
"""
