"""Does contrastive fine-tuning of the encoder beat the frozen one for ticket intents? A probe
on CLINC150 (CC BY 3.0; `fetch github:clinc/oos-eval`, `data/data_full.json`), before the
ticket product learns to fine-tune (issue "Ticket intents that fine-tune, calibrate and
escalate").

The same taxonomy as `benchmarks/clinc150.py` (10 training utterances per intent, drawn with
its seed), or the full training set. Frozen: all-MiniLM-L6-v2's vectors and the product's
logistic head (`tickets.training.fit_head`). Fine-tuned: the encoder trained first on pairs of
texts of the same intent with in-batch negatives (sentence-transformers'
MultipleNegativesRankingLoss, the SetFit idea: Tunstall et al., 2022), a fixed number of steps,
in a plain torch loop (no `datasets` dependency), then the same head on its vectors. Prints
top-1 on the test utterances for both, and the training minutes. HWU64 in the same layout
(`benchmarks/hwu64.py`) runs the same way.

    .venv/bin/python benchmarks/fine_tune_probe.py data_full.json [--full] [--steps 300]
"""

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import clinc150  # noqa: E402

from batch_pipeline.config import ModelConfig  # noqa: E402
from batch_pipeline.inference.models import resolve_model  # noqa: E402
from batch_pipeline.tickets.classifier.heads import normalised  # noqa: E402
from batch_pipeline.tickets.classifier.training import LOGISTIC, TrainingPool, fit_head  # noqa: E402

SEED = 2026
EXAMPLES = clinc150.EXAMPLES


def taxonomy_examples(train: list[list[str]]) -> dict[str, list[str]]:
    """Each intent's examples, as `benchmarks/clinc150.py` draws them."""
    return {
        label: entry["examples"] for label, entry in clinc150.taxonomy(train)["intents"].items()
    }


def embed(model, texts: list[str]) -> np.ndarray:  # noqa: ANN001
    return normalised(model.encode(texts, batch_size=128, convert_to_numpy=True))


def top1(model, names, by_intent, test) -> float:  # noqa: ANN001
    texts = [t for n in names for t in by_intent[n]]
    labels = np.asarray([i for i, n in enumerate(names) for _ in by_intent[n]])
    descriptions = embed(model, [n.replace("_", " ") for n in names])
    pool = TrainingPool(names, descriptions, embed(model, texts), labels, texts)
    head = fit_head(LOGISTIC, pool, np.arange(len(labels)))
    scores = head.scores(embed(model, [t for t, _ in test]))
    truth = np.asarray([names.index(y) for _, y in test])
    return float((scores.argmax(axis=1) == truth).mean())


def fine_tune(model, names, by_intent, steps: int, batch: int, lr: float) -> float:  # noqa: ANN001
    """Train `model` in place on (text, another text of its intent) pairs; the seconds."""
    import torch
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    torch.manual_seed(SEED)
    rng = random.Random(SEED)
    loss = MultipleNegativesRankingLoss(model)
    optimiser = torch.optim.AdamW(model.parameters(), lr=lr)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (steps - s) / steps)
    )
    model.train()
    started = time.perf_counter()
    for _ in range(steps):
        chosen = rng.sample(names, batch)  # one pair per intent: no in-batch false negatives
        anchors, positives = [], []
        for name in chosen:
            a, p = rng.sample(by_intent[name], 2)
            anchors.append(a)
            positives.append(p)
        features = [model.preprocess(anchors), model.preprocess(positives)]
        value = loss(features, None)
        optimiser.zero_grad()
        value.backward()
        optimiser.step()
        schedule.step()
    model.eval()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--full", action="store_true", help="the full training set")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-5)
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    by_intent = taxonomy_examples(data["train"])
    if args.full:
        for text, label in data["train"]:
            if text not in by_intent[label]:
                by_intent[label].append(text)
    names = sorted(by_intent)
    from sentence_transformers import SentenceTransformer

    path = resolve_model(ModelConfig()).path
    model = SentenceTransformer(str(path), device="cpu")
    frozen = top1(model, names, by_intent, data["test"])
    seconds = fine_tune(model, names, by_intent, args.steps, args.batch, args.lr)
    tuned = top1(model, names, by_intent, data["test"])
    per = "full" if args.full else f"{EXAMPLES} per intent"
    print(
        f"{args.data.name} {per}: frozen top-1 {frozen:.3f}, fine-tuned {tuned:.3f} "
        f"({tuned - frozen:+.3f}) after {args.steps} steps of {args.batch} pairs, lr {args.lr:g}, "
        f"in {seconds / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
