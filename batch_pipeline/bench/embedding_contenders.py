"""The paths the throughput benchmark (`bench.embedding`) times beside the planned runner,
each built here or left out with why: (c) ONNX Runtime as FastEmbed and Infinity run it
(`bench.anchors`), (d) OpenVINO's int8 model calibrated on the set's first chunks, (e) the
`vllm` embedding executor's engine; and what one timed run keeps (`TimedRun`)."""

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel, resolve_model
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.measures.memory import PeakRss


@dataclass
class TimedRun:
    """One timed embedding of the chunk set: its seconds, peak memory and vectors."""

    seconds: float
    peak_rss: int
    vectors: np.ndarray


def model_config_of(args: argparse.Namespace, precision: str = "faithful"):  # noqa: ANN202
    """A ModelConfig look-alike, so the benchmark needs no pydantic."""
    return SimpleNamespace(
        precision=precision,
        min_cosine=0.99,
        name="all-MiniLM-L6-v2",
        path=Path(args.model_path).resolve() if args.model_path else None,
        normalize=None,
        max_seq_length=None,
        document_prefix="",
        query_prefix="",
    )


def int8_runner(
    runner: EmbeddingRunner, args: argparse.Namespace, texts: list[str]
) -> tuple[EmbeddingRunner | None, str | None]:
    """(d)'s runner: OpenVINO's int8 model of the same model, calibrated on the set's first
    chunks (a sample pinned in a temporary folder, so every run of the bench calibrates on
    the same chunks); or None and why not (not a CPU, no openvino or nncf)."""
    import tempfile

    from batch_pipeline.inference.devices import nncf_installed
    from batch_pipeline.inference.openvino_model import openvino_version

    if runner.device != "cpu":
        return None, None
    if openvino_version() is None or not nncf_installed():
        return None, "(d) int8: needs openvino and nncf (pip install openvino nncf)"
    fixed = resolve_model(model_config_of(args, "fixed_accuracy"))
    cache = Path(tempfile.mkdtemp(prefix="bench-int8-"))
    made = EmbeddingRunner(
        fixed, "cpu", "int8", backend="openvino", num_threads=args.threads, export_cache=cache
    )
    made.calibrate(texts[: made.calibration_inputs])
    return made, None


def vllm_embedder(runner: EmbeddingRunner, model: ResolvedModel) -> tuple[Embedder | None, str]:
    """(e): the `vllm` embedding executor's engine on the runner's device, fp32 on CPU (the
    reference), or None and why where vLLM does not run."""
    try:
        from batch_pipeline.inference.vllm_embedder import VllmEmbedder, embed_engine_settings

        engine = VllmEmbedder(model, embed_engine_settings(runner.device, "auto"))
        engine.engine()
    except Exception as error:  # noqa: BLE001 - not installed, no device: the row is left out
        return None, f"(e) vllm left out: {type(error).__name__}: {str(error)[:200]}"
    return engine, f"(e) vllm: engine started in {engine.load_seconds:.1f} s (once per run)"


def run_anchor(anchor, texts: list[str], counts: list[int]) -> TimedRun:  # noqa: ANN001
    with PeakRss() as rss:
        start = time.perf_counter()
        vectors = anchor.embed(texts, counts)
        seconds = time.perf_counter() - start
    return TimedRun(seconds, rss.peak, vectors)


def onnx_anchor(runner: EmbeddingRunner, model: ResolvedModel):  # noqa: ANN201
    """ONNX Runtime as FastEmbed and Infinity run it, on CPU; None (and why) elsewhere."""
    if runner.device != "cpu":
        return None, "ONNX Runtime anchor: CPU only"
    try:
        from batch_pipeline.bench.anchors import OnnxRuntimeAnchor

        return OnnxRuntimeAnchor(runner.model, model, runner.num_threads), None
    except ImportError as error:
        return None, f"ONNX Runtime anchor skipped: {error} (pip install -e '.[dev]')"
