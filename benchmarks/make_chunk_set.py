"""Rebuild `benchmarks/chunks.jsonl`, the fixed chunk set of `python -m batch_pipeline.bench`.

Mixed lengths from a few tokens to the model's max sequence length: the sample handbook chunked
at 256 tokens, passes at 64 and 160 tokens, and short headings and sentences.
"""

import json
import random
from pathlib import Path

from batch_pipeline.config import ModelConfig
from batch_pipeline.inference.models import load_tokenizer, resolve_model
from batch_pipeline.text.chunking import ChunkSettings, chunk_document
from batch_pipeline.text.normalize import parse_document

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "chunks.jsonl"


def main() -> None:
    tokenizer = load_tokenizer(resolve_model(ModelConfig()).path)
    rng = random.Random(2026)
    docs = sorted((ROOT / "data" / "handbook").rglob("*.md"))
    texts: list[str] = []
    for path in docs:
        doc_id = path.relative_to(ROOT).as_posix()
        parsed = parse_document(path.read_text(), doc_id)
        texts += [
            c.input_text for c in chunk_document(doc_id, parsed, tokenizer, ChunkSettings(256, 32))
        ]
        for size, keep in ((64, 4), (160, 12)):
            chunks = chunk_document(doc_id, parsed, tokenizer, ChunkSettings(size, size // 8))
            texts += [c.input_text for c in chunks][:keep]
        texts += [parsed.title] + [" > ".join(s.headings) for s in parsed.sections][:2]
        sentences = [s for sec in parsed.sections for s in sec.text.split(". ") if len(s) > 20]
        texts += rng.sample(sentences, min(2, len(sentences)))
    unique = list(dict.fromkeys(t.strip() for t in texts if t.strip()))
    rng.shuffle(unique)
    with OUT.open("w") as handle:
        for text in unique[:1800]:
            handle.write(json.dumps({"text": text}) + "\n")
    print(f"wrote {min(len(unique), 1800)} chunks to {OUT}")


if __name__ == "__main__":
    main()
