"""The ticket product on a public intent set it has never seen: CLINC150 (Larson et al., 2019).

Turns CLINC150's `data_full.json` (150 intents, 100 training, 20 validation and 30 test
utterances each, and out-of-scope utterances) into what a user of the ticket product has: a
taxonomy (each intent's name as its description, and 10 training utterances as examples),
daily exports whose tickets carry an agent's `label` (the rest of the training utterances,
and the out-of-scope training utterances labelled `unknown`), an evaluation set (the test
utterances) and a pipeline.yaml per setting. Then it runs the product's own classifier, as
`batch-pipeline classify` does, on the test set and on the out-of-scope test set, and prints
one line per setting:

- `10 per intent`: the taxonomy alone, no labelled history
- `10 per intent + 100 unknown`: and the 100 out-of-scope training tickets labelled `unknown`
- `full training set`: the taxonomy and every training utterance, 100 per intent, plus those

Get the data with the search tool's `fetch github:clinc/oos-eval`, then
`git --git-dir <mirror>/repo show HEAD:data/data_full.json > data_full.json`, and run

    .venv/bin/python benchmarks/clinc150.py data_full.json [--out /tmp/clinc150]

Nothing is downloaded; the model is the configured one (all-MiniLM-L6-v2 by default). Another
intent set in the same layout runs the same way: `benchmarks/hwu64.py` writes HWU64 so (it has
no out-of-scope utterances, so the `unknown` setting and those columns are left out).
"""

import argparse
import json
import random
import time
from datetime import date, timedelta
from pathlib import Path

import yaml

from batch_pipeline.config import load_config
from batch_pipeline.config.taxonomy import UNKNOWN
from batch_pipeline.inference.models import resolve_model
from batch_pipeline.inference.runner import EmbeddingRunner
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.tickets.classifier.confidence import expected_calibration_error
from batch_pipeline.tickets.product import TicketProduct

EXAMPLES = 10  # per intent, in the taxonomy
SEED = 2026
FIRST_DAY = date(2026, 1, 1)
PER_DAY = 2000  # labelled tickets per daily export


def taxonomy(train: list[list[str]]) -> dict:
    """Each intent's name as its description and EXAMPLES of its training utterances, drawn
    with a fixed seed (the file's first ones are near-paraphrases of each other)."""
    by_intent: dict[str, list[str]] = {}
    for text, label in train:
        by_intent.setdefault(label, []).append(text)
    rng = random.Random(SEED)
    return {
        "intents": {
            label: {
                "description": label.replace("_", " "),
                "examples": rng.sample(texts, EXAMPLES),
            }
            for label, texts in sorted(by_intent.items())
        }
    }


def plain_logistic_regression(tax: dict, test: list[list[str]], runner: EmbeddingRunner) -> float:
    """The anchor: scikit-learn's LogisticRegression, defaults, on the same model's vectors
    of the same examples (no descriptions, no threshold), scored top-1 on the test set."""
    from sklearn.linear_model import LogisticRegression

    texts = [(e, label) for label, entry in tax["intents"].items() for e in entry["examples"]]
    model = LogisticRegression(max_iter=1000).fit(
        runner.embed([t for t, _ in texts]), [label for _, label in texts]
    )
    predicted = model.predict(runner.embed([t for t, _ in test]))
    return sum(p == y for p, (_, y) in zip(predicted, test, strict=True)) / len(test)


def write_exports(folder: Path, tickets: list[dict]) -> list[str]:
    """Daily JSONL exports of `tickets`; the days written."""
    folder.mkdir(parents=True, exist_ok=True)
    days = []
    for n, start in enumerate(range(0, len(tickets), PER_DAY)):
        day = (FIRST_DAY + timedelta(days=n)).isoformat()
        lines = [json.dumps(t, ensure_ascii=False) for t in tickets[start : start + PER_DAY]]
        (folder / f"{day}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        days.append(day)
    return days


def ticket(n: int, day: date, text: str, label: str) -> dict:
    return {"id": f"C{n:06d}", "created_at": f"{day}T12:00:00Z", "body": text, "label": label}


def setting(
    out: Path,
    name: str,
    history: list[list[str]],
    precision: str = "faithful",
    fine_tune: dict | None = None,
) -> Path:
    """A pipeline.yaml whose training window holds `history` as labelled tickets (and whose
    encoder is fine-tuned under `fine_tune`, a `tickets.training.fine_tune` recipe)."""
    folder = out / (name if precision == "faithful" else f"{name}-{precision}")
    if fine_tune is not None:
        folder = folder.with_name(f"{folder.name}-fine-tuned")
    tickets = [ticket(n, FIRST_DAY, text, label) for n, (text, label) in enumerate(history)]
    days = write_exports(folder / "exports", tickets) if tickets else []
    window = {"start": days[0], "end": days[-1]} if days else {}
    if fine_tune is not None:
        window["fine_tune"] = fine_tune
    config = {
        # fixed_accuracy asks every collection for an evaluation set: this one is never run
        "collections": [
            {
                "name": "unused",
                "source": {"kind": "filesystem", "path": "."},
                "evaluation": {"path": "../eval.jsonl"},
            }
        ],
        "tickets": {
            "source": {"kind": "filesystem", "path": "exports"},
            "taxonomy": "../taxonomy.yaml",
            "evaluation": {"path": "../eval.jsonl"},
            "start_date": FIRST_DAY.isoformat(),
            "classifier": "auto",
            "training": window,
        },
        "model": {"precision": precision},
    }
    (folder / "exports").mkdir(parents=True, exist_ok=True)
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


def measure(config_path: Path, runner: EmbeddingRunner, test, oos) -> dict:  # noqa: ANN001
    config = load_config(config_path)
    product = TicketProduct(config, resolve_storage(str(config_path.parent / "home")))
    tuning = None
    if (
        product.classifier.encoder_key is not None
    ):  # fine-tune the encoder (timed), and embed with it
        started = time.perf_counter()
        runner = EmbeddingRunner(product.model, runner.device)
        tuning = time.perf_counter() - started
    started = time.perf_counter()
    product.classify_texts([("", "warm up")], runner)  # trains the generation's classifier
    trained = time.perf_counter() - started
    report = json.loads(product.record().model_config)["trained"]
    predictions = product.classify_texts([("", text) for text, _ in test], runner)
    labels = [label for _, label in test]
    top1 = sum(p.top[0][0] == y for p, y in zip(predictions, labels, strict=True)) / len(labels)
    answered = [
        (p.intent, y) for p, y in zip(predictions, labels, strict=True) if p.intent != UNKNOWN
    ]
    shipped = sum(p == y for p, y in answered) / len(labels)
    caught = product.classify_texts([("", text) for text, _ in oos], runner)
    right = [p.top[0][0] == y for p, y in zip(predictions, labels, strict=True)]
    own = [p.raw_confidence for p in predictions]
    mixed = predictions + caught  # with the out-of-scope ones, whose every answer is wrong
    mixed_right = right + [False] * len(caught)
    mixed_own = [p.raw_confidence for p in mixed]
    return {
        "ece_mixed": (
            expected_calibration_error(mixed_own, mixed_right) if None not in mixed_own else None,
            expected_calibration_error([p.confidence for p in mixed], mixed_right),
        ),
        "temperature": report.get("temperature"),
        "ece_held_out": (report.get("ece_before"), report.get("ece_after")),
        "ece_test": (
            expected_calibration_error(own, right) if None not in own else None,
            expected_calibration_error([p.confidence for p in predictions], right),
        ),
        "classifier": report["classifier"],
        "candidates": report["candidates"],
        "top1": top1,
        "as_shipped": shipped,
        "coverage": len(answered) / len(labels),
        "answered_accuracy": sum(p == y for p, y in answered) / max(1, len(answered)),
        "oos_caught": (sum(p.intent == UNKNOWN for p in caught) / len(caught) if caught else None),
        "train_seconds": trained,
        "fine_tune_seconds": tuning,
        "min_confidence": report["min_confidence"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="CLINC150's data/data_full.json")
    parser.add_argument("--out", type=Path, default=Path("/tmp/clinc150"))
    parser.add_argument(
        "--int8", action="store_true", help="each setting again on the int8 model (fixed_accuracy)"
    )
    parser.add_argument(
        "--fine-tune",
        type=int,
        metavar="STEPS",
        help="each setting again with the encoder fine-tuned for STEPS steps "
        "(tickets.training.fine_tune's recipe otherwise as it ships)",
    )
    parser.add_argument(
        "--settings", nargs="+", metavar="N", type=int, help="only these settings (1, 2, 3)"
    )
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tax = taxonomy(data["train"])
    (out / "taxonomy.yaml").write_text(yaml.safe_dump(tax, sort_keys=False), encoding="utf-8")
    (out / "eval.jsonl").write_text(
        "".join(json.dumps({"body": t, "label": y}) + "\n" for t, y in data["test"]),
        encoding="utf-8",
    )
    shown = {text for entry in tax["intents"].values() for text in entry["examples"]}
    rest = [[t, y] for t, y in data["train"] if t not in shown]
    unknown = [[t, UNKNOWN] for t, _ in data["oos_train"]]
    settings = {
        "10 per intent": [],
        "10 per intent + 100 unknown": unknown,
        "full training set": rest + unknown,
    }
    if not unknown:  # a set without out-of-scope utterances (HWU64, `benchmarks/hwu64.py`)
        settings = {"10 per intent": [], "full training set": rest}
    if args.settings:
        settings = {k: v for n, (k, v) in enumerate(settings.items(), 1) if n in args.settings}
    config = load_config(setting(out, "probe", []))
    runner = EmbeddingRunner(resolve_model(config.model))
    tests, outside = len(data["test"]), len(data["oos_test"])
    print(f"{args.data.name}: {tests} test utterances, {outside} out of scope")
    print(f"model {config.model.name} on {runner.device} ({runner.dtype} until calibrated)")
    anchor = plain_logistic_regression(tax, data["test"], runner)
    print(f"{'plain logistic regression':<28} {'(anchor)':<9} top-1 {anchor:.3f}")
    paths = [("faithful", runner)]
    if args.int8:  # pins its calibration sample from the first setting's training texts
        fixed = resolve_model(config.model.model_copy(update={"precision": "fixed_accuracy"}))
        int8 = EmbeddingRunner(
            fixed, "cpu", "int8", backend="openvino", export_cache=out / "openvino"
        )
        paths.append(("fixed_accuracy", int8))
    tunings = [None] + ([{"steps": args.fine_tune}] if args.fine_tune else [])
    for name, history in settings.items():
        for precision, used in paths:
            for tuning in tunings:
                m = measure(
                    setting(
                        out, name.replace(" ", "_").replace("+", "and"), history, precision, tuning
                    ),
                    used,
                    data["test"],
                    data["oos_test"],
                )
                label = name + (" (int8)" if precision != "faithful" else "")
                show(label + (" fine-tuned" if tuning else ""), m)


def show(name: str, m: dict) -> None:
    candidates = ", ".join(f"{k} {v:.3f}" for k, v in m["candidates"].items())
    print(
        f"{name:<28} {m['classifier']:<9} top-1 {m['top1']:.3f}"
        f"  as shipped {m['as_shipped']:.3f}"
        f"  coverage {m['coverage']:.3f}  answered {m['answered_accuracy']:.3f}"
        + (f"  out-of-scope caught {m['oos_caught']:.3f}" if m["oos_caught"] is not None else "")
        + (
            f"  encoder fine-tuned in {m['fine_tune_seconds'] / 60:.1f} min"
            if m["fine_tune_seconds"] is not None
            else ""
        )
        + f"  trained in {m['train_seconds']:.1f} s"
        f"  (validation: {candidates}; unknown below {m['min_confidence']:.3f})"
    )
    held, test = m["ece_held_out"], m["ece_test"]
    if m["temperature"] is not None:
        print(
            f"{'':<28} calibration: temperature {m['temperature']:.4g}; expected calibration "
            f"error held out {held[0]:.3f} -> {held[1]:.3f}, on the test set {test[0]:.3f} -> "
            f"{test[1]:.3f}"
            + (
                f", with its out-of-scope utterances {m['ece_mixed'][0]:.3f} -> "
                f"{m['ece_mixed'][1]:.3f}"
                if m["oos_caught"] is not None
                else ""
            )
        )


if __name__ == "__main__":
    main()
