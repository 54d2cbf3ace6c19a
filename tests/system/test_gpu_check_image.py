"""The GPU check's Python on an image with only torch, transformers and sentence-transformers.

`benchmarks/gpu_check.sh` runs `batch_pipeline.bench` and `batch_pipeline.bench.end_to_end` on
a lent GPU machine, which has none of the project's other dependencies. Here both run as
subprocesses, on the CPU but otherwise with the check's flags (`--dtype auto`), with those
dependencies made unimportable (a `sitecustomize` that sets them to None in `sys.modules`, so
the prepare workers they start are blocked too): an import of any of them on the benchmarks'
path fails this test, as it would fail the GPU check.
"""

import json
import subprocess
import sys

from tests.support import REPO

NOT_ON_THE_GPU_IMAGE = (
    "openvino",
    "onnxruntime",
    "pyarrow",
    "dagster",
    "lancedb",
    "pydantic",
    "sqlalchemy",
)


def bare_env(tmp_path) -> dict[str, str]:
    """An environment whose Python cannot import what the GPU image lacks."""
    site = tmp_path / "bare_site"
    site.mkdir(exist_ok=True)
    blocker = [
        "import sys",
        f"for name in {NOT_ON_THE_GPU_IMAGE!r}:",
        "    sys.modules[name] = None",
    ]
    (site / "sitecustomize.py").write_text("\n".join(blocker) + "\n")
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": f"{site}:{REPO}",
    }


def run_bare(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`python *args` in the repository, in `bare_env`."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=bare_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_blocking_works(tmp_path):
    for name in NOT_ON_THE_GPU_IMAGE:
        blocked = run_bare(tmp_path, "-c", f"import {name}")
        assert blocked.returncode != 0, name
        assert "halted" in blocked.stderr, name
    assert run_bare(tmp_path, "-c", "import torch, transformers").returncode == 0


def test_the_throughput_benchmark_runs_without_the_projects_other_dependencies(tmp_path):
    chunks = tmp_path / "chunks.jsonl"
    lines = (REPO / "benchmarks" / "chunks.jsonl").read_text().splitlines()[:48]
    chunks.write_text("\n".join(lines) + "\n")
    out = tmp_path / "bench.json"
    result = run_bare(
        tmp_path,
        "-m",
        "batch_pipeline.bench",
        "--device",
        "cpu",
        "--rounds",
        "1",
        "--chunks",
        str(chunks),
        "--json-out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["chunks"] == 48
    assert report["b"]["tokens_per_s"] > 0 and report["a"]["tokens_per_s"] > 0
    assert report["backend"] == "torch"  # `auto` chose without OpenVINO, which is not there
    assert "onnxruntime" in report["anchor_note"]  # the CPU anchor is skipped, and says why
    assert report["min_cosine_b_vs_a"] > 0.9999


def test_the_end_to_end_benchmark_runs_without_the_projects_other_dependencies(tmp_path):
    out = tmp_path / "end_to_end.json"
    result = run_bare(
        tmp_path,
        "-m",
        "batch_pipeline.bench.end_to_end",
        "--device",
        "cpu",
        "--copies",
        "1",
        "--workers",
        "2",
        "--json-out",
        str(out),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["prepare_workers"] == 2
    assert report["documents"] == 100 and report["inputs_planned"] > 0
    assert report["bound_by"] in {"prepare", "plan", "execute"}
