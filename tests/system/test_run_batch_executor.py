"""One plan, two executors: the briefs run in-process on vLLM (`--executor vllm`) and through
vLLM's own `run-batch` over the plan's OpenAI batch file (`--executor vllm-run-batch`), with
the shipped model on the CPU, greedy, in the same dtype. Both land the same briefs in the
same table shape, and the run-batch run's rerun sends nothing."""

from tests.support import write_briefs_config, write_corpus
from tests.system.test_briefs_cli import cli


def workspace(root, chat_model_dir):  # noqa: ANN001, ANN201
    write_corpus(root / "docs")
    write_briefs_config(root, ", document_tokens: 256")
    models = root / "home" / "models"
    models.mkdir(parents=True)
    (models / chat_model_dir.name).symlink_to(chat_model_dir)
    return root


def test_the_same_plan_lands_the_same_briefs_in_process_and_through_run_batch(
    chat_model_dir, tmp_path
):
    landed = {}
    for executor in ("vllm", "vllm-run-batch"):
        root = workspace(tmp_path / executor, chat_model_dir)
        run = ["run", "--product", "handbook_briefs", "--dtype", "float32", "--json"]
        first = cli(root, *run, "--executor", executor)
        assert first["execute"]["requests_generated"] == 3, first
        rows = cli(root, "briefs", "--collection", "handbook", "--candidate", "--json")
        landed[executor] = {row["doc_id"]: row for row in rows}
        again = cli(root, *run, "--executor", executor)
        assert again["execute"]["requests_generated"] == 0  # nothing changed: nothing sent

    in_process, run_batch = landed["vllm"], landed["vllm-run-batch"]
    assert sorted(in_process) == sorted(run_batch) and len(in_process) >= 2
    for doc_id, row in in_process.items():
        other = run_batch[doc_id]
        assert other.keys() == row.keys()  # the same table shape
        for column in ("raw_output", "finish_reason", "summary", "audience", "input_hash",
                       "prompt_tokens", "output_tokens", "model_fingerprint"):  # fmt: skip
            assert other[column] == row[column], (doc_id, column)
