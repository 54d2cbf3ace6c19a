"""The first experiment for issue 54, kept as NOTES.md records it: all-MiniLM-L6-v2's OpenVINO
export quantized to int8 (weights and activations) by NNCF's post-training quantization,
against fp32 and bf16 on this CPU, in a plain loop. The product path it led to is
`model.precision: fixed_accuracy` (`batch_pipeline/inference/openvino_backend.py`), measured by
`make bench`'s (d) row and `python -m batch_pipeline.bench.retrieval --int8`.

    .venv/bin/python benchmarks/int8_probe.py [--preset mixed|performance] [--cranfield DIR]

Calibration: 300 chunks of `benchmarks/chunks.jsonl` drawn with seed 0 (the transformer model
type, SmoothQuant and fast bias correction, NNCF's defaults for it). Throughput: the 1,516
chunks in length-sorted batches of 32, best of two passes, tokens/s against
`SentenceTransformer.encode(batch_size=32)` in the same process. Fidelity: min and mean
cosine to `encode`'s vectors. Retrieval: recall@5 and MRR@5 (document hits) by exact cosine
search over the pages cut at paragraphs into chunks of at most 256 tokens, for the handbook's
evaluation set and, with `--cranfield`, Cranfield (`bench.retrieval`'s reading of it). The
chunking is this script's, not the pipeline's: compare rows with each other, not with
docs/search.md.
"""

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from batch_pipeline.bench.retrieval import cranfield  # noqa: E402
from batch_pipeline.config import ModelConfig  # noqa: E402
from batch_pipeline.inference import openvino_model as ovm  # noqa: E402
from batch_pipeline.inference.models import resolve_model  # noqa: E402

BATCH, MAX_TOKENS, CALIBRATION = 32, 256, 300


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", choices=("mixed", "performance"), default="mixed")
    parser.add_argument("--cranfield", type=Path)
    args = parser.parse_args()
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(resolve_model(ModelConfig()).path), device="cpu")
    tok = st.tokenizer
    texts = [json.loads(line)["text"] for line in (REPO / "benchmarks" / "chunks.jsonl").open()]
    work = Path(tempfile.mkdtemp(prefix="int8-probe-"))
    sample = tok(
        texts[:4], padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt"
    )
    ovm.export(st, dict(sample), work / "export")
    core = ovm.openvino_core()  # telemetry declined before nncf imports openvino_telemetry
    import nncf

    fp = core.read_model(str(work / "export" / ovm.MODEL_FILE))
    names = json.loads((work / "export" / ovm.INFO_FILE).read_text())["inputs"]

    def feeds(batch: list[str]) -> dict[str, np.ndarray]:
        f = tok(batch, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="np")
        return {n: f[n].astype(np.int64) for n in names}

    picked = np.random.default_rng(0).choice(len(texts), CALIBRATION, replace=False)
    preset = getattr(nncf.QuantizationPreset, args.preset.upper())
    started = time.perf_counter()
    quantized = nncf.quantize(
        fp,
        nncf.Dataset([feeds([texts[i]]) for i in picked]),
        model_type=nncf.ModelType.TRANSFORMER,
        preset=preset,
        subset_size=CALIBRATION,
    )
    print(f"quantized in {time.perf_counter() - started:.1f} s ({args.preset})")
    paths = {
        "openvino/fp32": (fp, "f32"),
        "openvino/bf16": (fp, "bf16"),
        "openvino/int8": (quantized, "f32"),  # int8 where quantized, fp32 between
        "openvino/int8+bf16": (quantized, "bf16"),
    }
    compiled = {
        name: core.compile_model(
            model, "CPU", {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"}
        )
        for name, (model, hint) in paths.items()
    }

    def embed(name: str, batch_texts: list[str]) -> np.ndarray:
        request = compiled[name].create_infer_request()
        out = [
            np.asarray(request.infer(feeds(batch_texts[s : s + BATCH]))[0], dtype=np.float32)
            for s in range(0, len(batch_texts), BATCH)
        ]
        return np.concatenate(out)

    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    ordered = [texts[i] for i in order]
    tokens = sum(int(feeds([t])["attention_mask"].sum()) for t in texts)
    reference = st.encode(ordered, batch_size=BATCH, convert_to_numpy=True)
    started = time.perf_counter()
    st.encode(ordered, batch_size=BATCH)
    encode_rate = tokens / (time.perf_counter() - started)
    print(f"{'path':<20} {'tokens/s':>9} {'x encode':>9} {'min cos':>8} {'mean cos':>9}")
    print(f"{'encode (torch fp32)':<20} {encode_rate:>9,.0f} {1:>9.2f} {1:>8.5f} {1:>9.5f}")
    for name in paths:
        best, vectors = 0.0, None
        for _ in range(2):
            started = time.perf_counter()
            vectors = embed(name, ordered)
            best = max(best, tokens / (time.perf_counter() - started))
        cos = np.sum(vectors * reference, 1) / (
            np.linalg.norm(vectors, axis=1) * np.linalg.norm(reference, axis=1)
        )
        print(
            f"{name:<20} {best:>9,.0f} {best / encode_rate:>9.2f} {cos.min():>8.5f} "
            f"{cos.mean():>9.5f}"
        )

    sets = [("handbook", REPO / "data" / "handbook", REPO / "data" / "handbook_eval.jsonl")]
    if args.cranfield:
        docs, eval_path = cranfield(args.cranfield, work / "cranfield")
        sets.append(("cranfield", docs, eval_path))
    encode = lambda batch: st.encode(batch, batch_size=BATCH, convert_to_numpy=True)  # noqa: E731
    for set_name, folder, eval_path in sets:
        queries = [json.loads(line) for line in eval_path.open()]
        chunks = chunks_of(folder, tok)
        scores = {"encode (torch fp32)": score(chunks, queries, encode)}
        for name in ("openvino/bf16", "openvino/int8"):
            scores[name] = score(chunks, queries, lambda batch, name=name: embed(name, batch))
        print(
            f"{set_name}: {len(chunks)} chunks, {len(queries)} queries; recall@5 / MRR@5: "
            + "; ".join(f"{k} {r:.4f} / {m:.4f}" for k, (r, m) in scores.items())
        )


def chunks_of(folder: Path, tok) -> list[tuple[str, str]]:  # noqa: ANN001
    """(doc id, text) per chunk: paragraphs joined up to `MAX_TOKENS` tokens."""
    rows = []
    for path in sorted(folder.rglob("*.md")):
        doc, current = str(path.relative_to(folder)), ""
        for para in (p.strip() for p in path.read_text().split("\n\n") if p.strip()):
            joined = f"{current}\n\n{para}".strip()
            if current and len(tok(joined)["input_ids"]) > MAX_TOKENS:
                rows.append((doc, current))
                current = para
            else:
                current = joined
        if current:
            rows.append((doc, current))
    return rows


def score(chunks: list[tuple[str, str]], queries: list[dict], embed) -> tuple[float, float]:  # noqa: ANN001
    """Recall@5 and MRR@5 of document hits, exact cosine search."""
    docs = [d for d, _ in chunks]
    vectors = embed([t for _, t in chunks])
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    asked = embed([q["query"] for q in queries])
    asked /= np.linalg.norm(asked, axis=1, keepdims=True)
    recall = mrr = 0.0
    for query, vector in zip(queries, asked, strict=True):
        ranked: list[str] = []
        for i in np.argsort(-(vectors @ vector)):
            if docs[i] not in ranked:
                ranked.append(docs[i])
            if len(ranked) == 5:
                break
        relevant = set(query["relevant"])
        recall += len(relevant & set(ranked)) / len(relevant)
        mrr += next((1 / (k + 1) for k, d in enumerate(ranked) if d in relevant), 0.0)
    return recall / len(queries), mrr / len(queries)


if __name__ == "__main__":
    main()
