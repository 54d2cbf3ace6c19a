"""One plan, three embedding executors: the index's chunks embedded in the run's own process
(`--executor local`, torch fp32: the reference), on vLLM's engine in that process (`vllm`) and
by vLLM's own `run-batch` over the plan's OpenAI batch file (`vllm-run-batch`), all with the
shipped all-MiniLM-L6-v2 on this CPU. Every chunk lands under the same generation with a vector
within cosine 0.999 of the reference, and a rerun embeds nothing."""

import numpy as np

from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.vector_store import VectorStore
from tests.support import index_of, many_articles, write_config, write_corpus
from tests.system.test_briefs_cli import cli

EXECUTORS = ("local", "vllm", "vllm-run-batch")


def vectors(root) -> dict[str, np.ndarray]:  # noqa: ANN001
    storage = resolve_storage(str(root / "home"))
    table = VectorStore(storage.lancedb_uri).scan(
        index_of(root / "pipeline.yaml"), ["chunk_id", "vector"]
    )
    return dict(
        zip(table["chunk_id"].to_pylist(), np.asarray(table["vector"].to_pylist()), strict=True)
    )


def test_local_vllm_and_run_batch_embed_the_same_chunks_into_the_same_vectors(tmp_path):
    landed = {}
    for executor in EXECUTORS:
        root = tmp_path / executor
        write_corpus(root / "docs")
        many_articles(root / "docs" / "articles", count=12)
        write_config(root / "pipeline.yaml")
        run = ["run", "--collection", "handbook", "--device", "cpu", "--dtype", "float32"]
        first = cli(root, *run, "--executor", executor, "--json")
        execute = first["execute"]
        assert execute["inputs_embedded"] > 40 and execute["inputs_failed"] == 0, execute
        assert execute["dtype"] == "float32"
        if executor != "local":
            assert execute["backend"] == executor
        again = cli(root, *run, "--executor", executor, "--json")
        assert again["execute"]["inputs_embedded"] == 0  # nothing changed: nothing embedded
        landed[executor] = vectors(root)

    reference = landed.pop("local")
    for executor, found in landed.items():
        assert sorted(found) == sorted(reference), executor  # the same chunks, the same keys
        for chunk_id, vector in reference.items():
            other = found[chunk_id]
            cosine = float(vector @ other / np.linalg.norm(vector) / np.linalg.norm(other))
            assert cosine >= 0.999, (executor, chunk_id, cosine)
