"""The ticket cascade in the product (`tickets.cascade`) on CLINC150 (CC BY 3.0; `fetch
github:clinc/oos-eval`): a day of tickets classified, its least sure sent to a chat model.

The setting is `benchmarks/clinc150.py`'s `10 per intent` (the taxonomy alone, 10 examples
per intent): the threshold is chosen on the held-out examples (each scored by a head trained
without it; at most `--label-budget`), and the day is CLINC150's 4,500 in-scope test
utterances as one day's export. The run is the product's own (`DayPartition.run`), the
chat model on the executor `--executor` names:

- `vllm` (in the run's process) with the shipped SmolLM2-135M-Instruct, or, with
  `--stand-in`, a STAND-IN chat model that answers from the labels (right every time);
- `openai-batch` through the loopback Batch API emulator (`tests/support/batch_api.py`),
  whose model is that STAND-IN, costed at `--price-in` and `--price-out` per million tokens.

Prints the threshold chosen and its arithmetic (the held-out texts, the right answers, the
Clopper-Pearson bound at delta / M, the escalated share), then the day: what escalated, each
model's accuracy there, the combined accuracy against the target, and the cost per 1,000.

    .venv/bin/python benchmarks/cascade_product.py data_full.json [--executor openai-batch]
        [--stand-in] [--target 0.92] [--delta 0.1] [--label-budget 1000]
"""

import argparse
import json
import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))

import clinc150  # noqa: E402

from batch_pipeline.config import load_config  # noqa: E402
from batch_pipeline.inference.fake import FakeGenerator, LabelAnswering  # noqa: E402
from batch_pipeline.inference.models import resolve_model  # noqa: E402
from batch_pipeline.inference.runner import EmbeddingRunner  # noqa: E402
from batch_pipeline.state.storage import resolve_storage  # noqa: E402
from batch_pipeline.tickets.product import TicketProduct  # noqa: E402
from batch_pipeline.tickets.report import cascade_text  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", type=Path, help="CLINC150's data/data_full.json")
    parser.add_argument("--out", type=Path, default=Path("/tmp/cascade-product"))
    parser.add_argument("--executor", choices=["vllm", "openai-batch"], default="vllm")
    parser.add_argument("--stand-in", action="store_true", help="the chat model answers labels")
    parser.add_argument("--target", type=float, default=0.92)
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--label-budget", type=int, default=1000)
    parser.add_argument("--price-in", type=float, default=0.075, help="per million tokens")
    parser.add_argument("--price-out", type=float, default=0.30, help="per million tokens")
    args = parser.parse_args()
    data = json.loads(args.data.read_text(encoding="utf-8"))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    tax = clinc150.taxonomy(data["train"])
    (out / "taxonomy.yaml").write_text(yaml.safe_dump(tax, sort_keys=False), encoding="utf-8")
    test = data["test"]
    (out / "eval.jsonl").write_text(
        "".join(json.dumps({"body": t, "label": y}) + "\n" for t, y in test[:300]),
        encoding="utf-8",
    )
    labels = {text: label for text, label in data["train"] + test}
    name = f"cascade-{args.executor}" + ("-stand-in" if args.stand_in else "")
    path = clinc150.setting(out, name, [])
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    cascade = {
        "target_accuracy": args.target,
        "delta": args.delta,
        "label_budget": args.label_budget,
        "executor": args.executor,
    }
    emulator = None
    generator = None
    if args.executor == "openai-batch":
        from tests.support.batch_api import BatchApiEmulator

        emulator = BatchApiEmulator()
        emulator._fake = LabelAnswering(labels)  # the provider's model: the STAND-IN
        emulator.polls_to_finish = 1
        os.environ["OPENAI_API_KEY"] = emulator.api_key
        cascade["batch_api"] = {
            "api_base": emulator.start(),
            "price_per_million_input_tokens": args.price_in,
            "price_per_million_output_tokens": args.price_out,
        }
        generator = FakeGenerator()  # counts the prompts' tokens for the plan
    elif args.stand_in:
        generator = LabelAnswering(labels)
    config["tickets"]["cascade"] = cascade
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    day = clinc150.FIRST_DAY + timedelta(days=40)
    tickets = [clinc150.ticket(n, day, text, label) for n, (text, label) in enumerate(test)]
    export = path.parent / "exports" / f"{day}.jsonl"
    export.write_text("".join(json.dumps(t) + "\n" for t in tickets), encoding="utf-8")

    loaded = load_config(path)
    product = TicketProduct(loaded, resolve_storage(str(path.parent / "home")), generator=generator)
    runner = EmbeddingRunner(resolve_model(loaded.model))
    started = time.perf_counter()
    try:
        landed = product.day(day).run(f"bench-{int(time.time())}", runner)["land"].summary
    finally:
        if emulator is not None:
            emulator.stop()
    seconds = time.perf_counter() - started
    plan = product.trained()["cascade"]
    print(
        f"{args.data.name}, 10 per intent, chat model on {args.executor}"
        + (" (STAND-IN answering from the labels)" if generator is not None else "")
    )
    print("plan" + cascade_text(plan).removeprefix(";"))
    print(
        f"  arithmetic: threshold {plan['threshold']}, {plan['right']} of {plan['labels']} "
        f"held-out texts right, lower bound {plan['lower_bound']:.4f} at delta/{plan['candidates']}"
        f" = {plan['delta'] / plan['candidates']:.2e}, escalated {plan['escalated_share']:.1%}, "
        f"head alone {plan['head_accuracy']:.4f}; chat model's cost there {plan['chat_cost']:.4g}"
    )
    rows = product.intents.day_rows(product.index, day.isoformat()).to_pylist()
    truth = {t["id"]: t["label"] for t in tickets}
    escalated = [r for r in rows if r["answered_by"] not in ("classifier", "awaiting")]
    right = sum(r["intent"] == truth[r["ticket_id"]] for r in rows) / len(rows)
    head = sum(r["head_intent"] == truth[r["ticket_id"]] for r in rows) / len(rows)
    print(
        f"day: {len(rows)} tickets in {seconds:.0f} s; {landed.tickets_escalated} escalated "
        f"({landed.tickets_escalated / len(rows):.1%}), {landed.tickets_answer_awaiting} awaiting"
    )
    if escalated:
        chat_there = sum(r["intent"] == truth[r["ticket_id"]] for r in escalated) / len(escalated)
        head_there = sum(r["head_intent"] == truth[r["ticket_id"]] for r in escalated)
        print(
            f"  on the escalated: chat model {chat_there:.3f}, classifier "
            f"{head_there / len(escalated):.3f}"
        )
    cost = landed.escalation_cost
    print(
        f"  combined accuracy {right:.4f} (classifier alone {head:.4f}) against the target "
        f"{args.target}; escalation cost {cost:.4g}, {cost / len(rows) * 1000:.4g} per 1,000 "
        "tickets"
    )


if __name__ == "__main__":
    main()
