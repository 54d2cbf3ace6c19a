"""The reranker's gate as an operator meets it: the sample handbook indexed with the real
all-MiniLM-L6-v2 and the shipped chat model configured as its yes/no judge. The run's review
refuses the judge (it ranks the evaluation set's pages worse than hybrid search alone) and
says so on the run's output; `search --rerank` then refuses in one line, saying why, and
plain search still answers."""

import subprocess

from tests.support import REPO, cli_command, pipeline_env


def test_the_shipped_chat_model_as_judge_is_refused_and_search_rerank_says_why(
    tmp_path, chat_model_dir
):
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: handbook\n"
        f"    source: {{kind: filesystem, path: {REPO / 'data/handbook'}, glob: '**/*.md'}}\n"
        "    chunking: {max_tokens: 256, overlap_tokens: 32}\n"
        f"    evaluation: {{path: {REPO / 'data/handbook_eval.jsonl'}, k: 5}}\n"
        f"    reranker: {{model: judge, chat_model: {chat_model_dir}, candidates: 10}}\n"
    )
    env = pipeline_env(config, tmp_path / "home")

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            cli_command(*args), env=env, capture_output=True, text=True, timeout=1500
        )

    run = cli("run", "--collection", "handbook")
    assert run.returncode == 0, run.stderr
    (line,) = [line for line in run.stdout.splitlines() if "handbook_reranker__" in line]
    assert ": refused: no better than hybrid search alone: mrr_at_10 " in line, line
    assert "ndcg_at_10" in line

    refused = cli("search", "how do I reset my password", "--collection", "handbook", "--rerank")
    assert refused.returncode == 2 and refused.stdout == ""
    (reason,) = refused.stderr.splitlines()
    assert "reranker is not used: refused: no better than hybrid search alone" in reason

    plain = cli("search", "how do I reset my password", "--collection", "handbook", "-k", "1")
    assert plain.returncode == 0 and "account/reset-password.md" in plain.stdout
