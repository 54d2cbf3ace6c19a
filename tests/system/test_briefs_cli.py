"""The document briefs end to end with the real small model: `batch-pipeline run --product
briefs` on real vLLM briefs every document into typed rows and reviews the generation; a
rerun generates nothing; `briefs` reads them back."""

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support import write_briefs_config, write_corpus

REPO = Path(__file__).resolve().parents[2]
CLI = Path(sys.executable).parent / "batch-pipeline"


def cli(workspace, *args, env: dict[str, str] | None = None):
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "BATCH_PIPELINE_CONFIG": str(workspace / "pipeline.yaml"),
        "BATCH_PIPELINE_HOME": str(workspace / "home"),
        **(env or {}),
    }
    done = subprocess.run(
        [str(CLI), *args], capture_output=True, text=True, timeout=600, env=env, cwd=workspace
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return json.loads(done.stdout)


def test_briefs_run_on_real_vllm_and_a_rerun_generates_nothing(chat_model_dir, tmp_path):
    write_corpus(tmp_path / "docs")
    write_briefs_config(tmp_path, ", document_tokens: 256")
    models = tmp_path / "home" / "models"
    models.mkdir(parents=True)
    (models / chat_model_dir.name).symlink_to(chat_model_dir)  # converted once per session

    first = cli(tmp_path, "run", "--product", "handbook_briefs", "--json")
    execute, land = first["execute"], first["land"]
    assert execute["requests_generated"] == 3 and execute["device"] == "cpu"
    assert land["briefs_landed"] + land["briefs_failed"] == 3
    assert land["briefs_landed"] >= 2, first["failed"]  # the small model, constrained
    assert execute["output_tokens_per_second"] > 0 and "decode_tokens_per_second" in execute
    assert first["measures"]["documents_attempted"] == 3 and first["measures"]["run_cost"] > 0
    assert first["review"]["state"] in ("live", "building", "candidate")

    again = cli(tmp_path, "run", "--collection", "handbook", "--kind", "briefs", "--json")
    assert again["execute"]["requests_generated"] == 0  # nothing changed: nothing generated

    rows = cli(tmp_path, "briefs", "--collection", "handbook", "--candidate", "--json")
    assert len(rows) == land["briefs_landed"]
    for row in rows:
        assert row["audience"] in ("owner", "admin", "member", "guest")
        assert len(row["questions"]) == 3 and row["summary"]
        assert row["finish_reason"] == "stop" and row["model_name"] == "SmolLM2-135M-Instruct"
        assert json.loads(row["raw_output"])["summary"] == row["summary"]
