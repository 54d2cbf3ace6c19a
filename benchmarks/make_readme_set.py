"""Rebuild `benchmarks/readme_chunks.jsonl`, the benchmark's second chunk set: real READMEs.

The long descriptions (the `METADATA` files) of the Python packages installed with the
project, in Markdown and reStructuredText, from one-line summaries to long manuals with code:
the mixed lengths where packing by token budget pays off, unlike the uniform handbook prose.
They are normalised and chunked by the pipeline's own prepare functions at 256 tokens, and a
fixed seed picks 1,500 chunks, so every run (and every machine) measures the same set; the
file is committed, and records which package each chunk came from.

    .venv/bin/python benchmarks/make_readme_set.py
"""

import json
import random
from importlib import metadata
from pathlib import Path

from batch_pipeline.config import ModelConfig
from batch_pipeline.inference.models import load_tokenizer, resolve_model
from batch_pipeline.text.chunking import ChunkSettings, chunk_document
from batch_pipeline.text.normalize import parse_document

OUT = Path(__file__).resolve().parent / "readme_chunks.jsonl"
SIZE = 1500
SEED = 2026


def long_descriptions() -> list[tuple[str, str, str]]:
    """(package, doc id with the markup's suffix, text) for every installed package with one."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        body = dist.metadata.get_payload() or dist.metadata.get("Description") or ""
        if not name or len(body.strip()) < 40 or name.lower() in found:
            continue
        kind = (dist.metadata.get("Description-Content-Type") or "").lower()
        suffix = ".md" if "markdown" in kind else ".rst" if "rst" in kind else ".txt"
        found[name.lower()] = (name, f"{name}/README{suffix}", body)
    return [found[k] for k in sorted(found)]


def main() -> None:
    tokenizer = load_tokenizer(resolve_model(ModelConfig()).path)
    chunks: list[dict] = []
    for package, doc_id, text in long_descriptions():
        parsed = parse_document(text, doc_id)
        for chunk in chunk_document(doc_id, parsed, tokenizer, ChunkSettings(256, 32)):
            chunks.append({"text": chunk.input_text, "package": package})
    unique = list({c["text"]: c for c in chunks}.values())
    picked = random.Random(SEED).sample(unique, min(SIZE, len(unique)))
    with OUT.open("w") as handle:
        for chunk in picked:
            handle.write(json.dumps(chunk) + "\n")
    packages = len({c["package"] for c in picked})
    print(f"wrote {len(picked)} chunks of {packages} packages' READMEs to {OUT}")


if __name__ == "__main__":
    main()
