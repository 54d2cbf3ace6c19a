"""The ticket cascade's threshold on CLINC150 (CC BY 3.0; `fetch github:clinc/oos-eval`), with
the shipped chat model in process: does sending the classifier's least sure tickets to a chat
model meet a target accuracy with the stated guarantee
(`batch_pipeline/tickets/cascade/threshold.py`)?

The classifier is the product's, trained as `benchmarks/clinc150.py`'s `10 per intent`
setting. The labelled held-out tickets are the first `--labels` of CLINC150's validation
split (never trained on). The chat model answers the `--ask` least sure of them, its output
held by a JSON schema to one of the taxonomy's intents (an `enum`) or `unknown`, greedy; a
deeper threshold is counted as gaining nothing. `choose_threshold` picks the threshold, and
the cascade is then run on the 4,500 test utterances (the chat model answering those under
the threshold). Prints what it escalated, each model's accuracy there, the bound and the
combined accuracy against the target. With `--stand-in`, a STAND-IN chat model that answers
from the labels (right every time) shows the guarantee's arithmetic where escalating pays.

    .venv/bin/python benchmarks/cascade_probe.py data_full.json [--labels 1000] [--ask 300]
        [--target 0.92] [--delta 0.1] [--stand-in]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))

import clinc150  # noqa: E402
import yaml  # noqa: E402

from batch_pipeline.config import load_config  # noqa: E402
from batch_pipeline.config.taxonomy import UNKNOWN  # noqa: E402
from batch_pipeline.inference.chat_models import resolve_chat_model  # noqa: E402
from batch_pipeline.inference.generator import Prompt, Sampling  # noqa: E402
from batch_pipeline.inference.models import resolve_model  # noqa: E402
from batch_pipeline.inference.runner import EmbeddingRunner  # noqa: E402
from batch_pipeline.inference.vllm_generator import (  # noqa: E402
    VllmGenerator,
    engine_settings_for,
)
from batch_pipeline.state.storage import resolve_storage  # noqa: E402
from batch_pipeline.tickets.cascade.chat import SYSTEM, answer_schema  # noqa: E402
from batch_pipeline.tickets.cascade.threshold import choose_threshold  # noqa: E402
from batch_pipeline.tickets.product import TicketProduct  # noqa: E402


def ask(generator: VllmGenerator, names: list[str], texts: list[str]) -> tuple[list[str], float]:
    """The chat model's intent for each text, and the seconds it took."""
    system = SYSTEM.format(intents=", ".join(names))
    prompts = [Prompt(f"t{n}", system, text) for n, text in enumerate(texts)]
    started = time.perf_counter()
    outputs = generator.generate(prompts, Sampling(max_tokens=24), answer_schema(names))
    answers = []
    for output in outputs:
        try:
            answers.append(json.loads(output.text)["intent"])
        except (ValueError, KeyError, TypeError):
            answers.append(UNKNOWN)
    return answers, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/cascade-probe"))
    parser.add_argument("--labels", type=int, default=1000)
    parser.add_argument("--ask", type=int, default=300)
    parser.add_argument("--target", type=float, default=0.92)
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument(
        "--stand-in", action="store_true", help="a chat model answering from the labels"
    )
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tax = clinc150.taxonomy(data["train"])
    (out / "taxonomy.yaml").write_text(yaml.safe_dump(tax, sort_keys=False), encoding="utf-8")
    (out / "eval.jsonl").write_text(
        "".join(json.dumps({"body": t, "label": y}) + "\n" for t, y in data["test"][:300]),
        encoding="utf-8",
    )
    config_path = clinc150.setting(out, "10_per_intent", [])
    config = load_config(config_path)
    product = TicketProduct(config, resolve_storage(str(out / "home")))
    runner = EmbeddingRunner(resolve_model(config.model))
    names = sorted(tax["intents"])

    held = data["val"][: args.labels]
    predictions = product.classify_texts([("", t) for t, _ in held], runner)
    confidence = np.asarray([p.confidence for p in predictions])
    head_right = np.asarray([p.top[0][0] == y for p, (_, y) in zip(predictions, held, strict=True)])
    if args.stand_in:
        labels = {text: label for text, label in [*data["val"], *data["test"]]}

        def answer(texts: list[str]) -> tuple[list[str], float]:
            return [labels[t] for t in texts], 0.0
    else:
        chat = resolve_chat_model(None, resolve_storage(None).home)  # `make chat-model` made it
        generator = VllmGenerator(chat, engine_settings_for(chat, "cpu"))

        def answer(texts: list[str]) -> tuple[list[str], float]:
            return ask(generator, names, texts)

    asked = np.argsort(confidence, kind="stable")[: args.ask]
    answers, seconds = answer([held[i][0] for i in asked])
    chat_right = head_right.copy()  # not asked: counted as gaining nothing
    chat_right[asked] = [a == held[i][1] for a, i in zip(answers, asked, strict=True)]
    on_asked = (chat_right[asked].mean(), head_right[asked].mean())
    print(
        f"held out: {len(held)} labelled validation utterances; the classifier "
        f"{head_right.mean():.3f}; "
        f"on its {args.ask} least sure, the chat model {on_asked[0]:.3f} against the "
        f"classifier's {on_asked[1]:.3f} ({seconds / args.ask:.2f} s a ticket in process)"
    )
    plan = choose_threshold(confidence, head_right, chat_right, args.target, args.delta)
    print(
        f"plan: target {plan.target_accuracy:.3f} with probability {1 - plan.delta:.2f}: "
        f"threshold {plan.threshold}, {plan.right} of {plan.labels} right, Clopper-Pearson "
        f"lower bound {plan.lower_bound:.4f} at delta/{plan.candidates}, escalated "
        f"{plan.escalated_share:.1%}; {plan.note}"
    )
    test = data["test"]
    tested = product.classify_texts([("", t) for t, _ in test], runner)
    combined = [p.top[0][0] for p in tested]
    if plan.threshold is not None:
        under = [i for i, p in enumerate(tested) if p.confidence < plan.threshold]
        answers, seconds = answer([test[i][0] for i in under])
        for i, answer in zip(under, answers, strict=True):
            combined[i] = answer
        print(f"test: {len(under)} of {len(test)} escalated ({len(under) / len(test):.1%})")
    head = np.mean([p.top[0][0] == y for p, (_, y) in zip(tested, test, strict=True)])
    cascade = np.mean([c == y for c, (_, y) in zip(combined, test, strict=True)])
    print(f"test: classifier top-1 {head:.3f}, cascade {cascade:.3f}, target {args.target:.3f}")


if __name__ == "__main__":
    main()
