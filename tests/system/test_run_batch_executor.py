"""One plan, two executors: the briefs run in-process on vLLM (`--executor vllm`) and through
vLLM's own `run-batch` over the plan's OpenAI batch file (`--executor vllm-run-batch`), with
the shipped model on the CPU, greedy, in the same dtype. Both land the same briefs in the
same table shape, and the run-batch run's rerun sends nothing. So do run-batch's two engines
(`--data-parallel-size 2`) and its engine split over three workers (`--tensor-parallel-size
3`, the shipped model's 9 heads in threes), each started by vLLM on this CPU."""

from tests.support import write_briefs_config, write_corpus
from tests.system.test_briefs_cli import cli

# one NUMA node here: vLLM binds its workers' threads to their own nodes, so three workers
# are told their cores (two share one)
THREE_WORKERS_ON_TWO_CORES = {"VLLM_CPU_OMP_THREADS_BIND": "0|1|0"}


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
    ways = {
        "vllm": ([], {}),
        "vllm-run-batch": ([], {}),
        "data-parallel": (["--data-parallel-size", "2"], {}),
        "tensor-parallel": (["--tensor-parallel-size", "3"], THREE_WORKERS_ON_TWO_CORES),
    }
    for way, (flags, env) in ways.items():
        executor = "vllm" if way == "vllm" else "vllm-run-batch"
        root = workspace(tmp_path / way, chat_model_dir)
        run = ["run", "--product", "handbook_briefs", "--dtype", "float32", "--json"]
        first = cli(root, *run, "--executor", executor, *flags, env=env)
        assert first["execute"]["requests_generated"] == 3, first
        assert first["execute"]["executor"] == executor and first["execute"]["devices"] == 1
        rows = cli(root, "briefs", "--collection", "handbook", "--candidate", "--json")
        landed[way] = {row["doc_id"]: row for row in rows}
        if not flags:
            again = cli(root, *run, "--executor", executor)
            assert again["execute"]["requests_generated"] == 0  # nothing changed: nothing sent

    in_process = landed.pop("vllm")
    assert len(in_process) >= 2
    for way, run_batch in landed.items():
        assert sorted(in_process) == sorted(run_batch), way
        for doc_id, row in in_process.items():
            other = run_batch[doc_id]
            assert other.keys() == row.keys()  # the same table shape
            for column in (
                "raw_output",
                "finish_reason",
                "summary",
                "audience",
                "input_hash",
                "prompt_tokens",
                "output_tokens",
                "model_fingerprint",
            ):
                assert other[column] == row[column], (way, doc_id, column)
