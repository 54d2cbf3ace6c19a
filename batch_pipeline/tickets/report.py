"""The ticket product in `batch-pipeline status` and `doctor`: days classified against the days
due, the latest day's mix, failing rows, the last run, the generations and the table's health.

A day is due from `tickets.start_date` to yesterday (the Dagster partitions); it counts as
classified when the live generation holds rows for it. Reads the live table and the tracking
store; `doctor` also checks that the export can be read. `day_report` is one day under the
live generation, as the `intents` command shows it.
"""

import json
from dataclasses import dataclass
from datetime import date

from batch_pipeline.declaration import RunReport
from batch_pipeline.generations.review import NoLiveGenerationError
from batch_pipeline.health.freshness import utc_time
from batch_pipeline.health.tables import table_damage
from batch_pipeline.measures.progress import duration
from batch_pipeline.reports.text import doctor_line, generations_line, table_summary, text
from batch_pipeline.sources import SourceUnavailableError
from batch_pipeline.state.tracking import GenerationRecord
from batch_pipeline.tickets.classifier.training import dropped_labels_text
from batch_pipeline.tickets.mix import IntentMix
from batch_pipeline.tickets.product import TicketProduct

MISSING_DAYS_SHOWN = 5  # the text output names at most this many missing days
REPORT_KIND = "ticket_intents"


@dataclass(frozen=True)
class _Coverage:
    """The live generation's table (None before one), the days due and those it holds."""

    live_table: str | None
    due: list[str]
    held: list[str]

    @classmethod
    def of(cls, product: TicketProduct, today: date | None, readable: bool = True) -> "_Coverage":
        """`readable`: the live table's rows can be read (a table that lost a data file
        holds no day that can be counted)."""
        live = product.registry.live(product.name)
        held = product.intents.days(live.index_name) if live and readable else []
        return cls(live.index_name if live else None, product.partition_days(today), held)

    def metadata(self) -> dict[str, object]:
        return {
            "live_table": self.live_table,
            "days_due": len(self.due),
            "days_classified": len(set(self.held) & set(self.due)),
            "missing_days": sorted(set(self.due) - set(self.held)),
        }


def product_status(product: TicketProduct, today: date | None = None) -> dict[str, object]:
    """Days classified and missing, tickets, the latest day's unknown rate, failing rows,
    the last run, and the current configuration's generation against the live one."""
    coverage = _Coverage.of(product, today)
    reader = coverage.live_table
    latest = coverage.held[-1] if coverage.held else None
    mix = None
    if latest is not None:
        rows = product.intents.day_rows(reader, latest, ["intent", "confidence"])
        mix = IntentMix.of(rows["intent"].to_pylist(), rows["confidence"].to_pylist())
    last = product.tracking.last_run(reader) if reader else None
    current = product.registry.get(product.name, product.fingerprint)
    return {
        "product": product.name,
        "kind": REPORT_KIND,
        "generation": product.index,
        "generation_state": current.state if current else "not built",
        "start_date": product.settings.start_date,
        **coverage.metadata(),
        "tickets": product.store.count_rows(reader) if reader else 0,
        "latest_day": latest,
        "latest_day_tickets": mix.total if mix else None,
        "latest_day_unknown_rate": round(mix.unknown_rate, 4)
        if mix and mix.unknown_rate is not None
        else None,
        "failing_tickets": product.tracking.failure_count(reader) if reader else 0,
        "last_run_id": last["run_id"] if last else None,
        "last_landed_at": utc_time(last["finished_at"]) if last else None,
        "model": product.classifier.model_name,
        "source_error": None,
    }


def product_health(product: TicketProduct, today: date | None = None) -> dict[str, object]:
    """What `doctor` reports: whether the export can be read, every due day is classified
    under the live generation, and the live table's size, versions and fragments."""
    live = product.registry.live(product.name)
    damage = table_damage(product.store, live.index_name if live else None, product.name)
    coverage = _Coverage.of(product, today, readable=damage is None)
    reader = coverage.live_table
    try:
        product.export.check()
        source_error = None
    except SourceUnavailableError as error:
        source_error = str(error)
    health: dict[str, object] = {
        "product": product.name,
        "kind": REPORT_KIND,
        "source_error": source_error,
        **coverage.metadata(),
        **product.store.table_health(reader),
        "failing_tickets": product.tracking.failure_count(reader) if reader else 0,
    }
    problems = [f"source unavailable: {source_error}"] if source_error else []
    missing = health["missing_days"]
    if damage is not None:
        health["table_damaged"] = damage["table_damaged"]
        problems.append(damage["problem"])
    elif reader is None:
        problems.append(
            "no live generation yet: classify a day (batch-pipeline run --day YYYY-MM-DD)"
        )
    elif missing:
        problems.append(
            f"{len(missing)} of {len(coverage.due)} due days not classified under the live "
            f"generation: {missing_days_text(missing)} (a day whose export is there: "
            "batch-pipeline run --day D, or a backfill of ticket_intents_job)"
        )
    health["problems"] = problems
    health["healthy"] = not problems
    return health


def missing_days_text(missing: list[str]) -> str:
    """The first few missing days, and how many more."""
    shown = ", ".join(missing[:MISSING_DAYS_SHOWN])
    more = len(missing) - MISSING_DAYS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def status_lines(rows: list[dict[str, object]], currency: str) -> list[str]:
    """The ticket product's status in a few lines."""
    lines = []
    for r in rows:
        missing = r["missing_days"]
        lines.append(
            f"{r['product']} (ticket intents): {r['days_classified']} of {r['days_due']} days "
            f"classified since {r['start_date']}"
            + (f" (missing {missing_days_text(missing)})" if missing else "")
            + f"; {r['tickets']:,} tickets; {r['failing_tickets']} failing rows"
        )
        if r["latest_day"]:
            rate = r["latest_day_unknown_rate"]
            lines.append(
                f"  latest day {r['latest_day']}: {r['latest_day_tickets']} tickets, unknown rate "
                + ("-" if rate is None else f"{rate:.1%}")
            )
        landed = text(r["last_landed_at"]) if r["last_landed_at"] else "never"
        lines.append(f"  last run {r['last_run_id'] or '-'}, landed {landed}; model {r['model']}")
        lines.append(generations_line(r))
    return lines


def health_line(r: dict[str, object]) -> str:
    """The ticket product's doctor verdict in one line (its problems follow it)."""
    return doctor_line(
        r,
        f"{r['days_classified']} of {r['days_due']} due days classified",
        table_summary(r),
        f"{r['failing_tickets']} failing rows",
    )


def candidate_scores(trained: dict) -> str:
    """Every candidate's held-out accuracy: `prototype 0.968, logistic 0.985`."""
    return ", ".join(f"{k} {v:.3f}" for k, v in trained["candidates"].items())


def generation_note(model_config: dict[str, object]) -> str:
    """What `generations list` says of a ticket generation beyond every product's fields: the
    classifier its training chose, its encoder's fine-tuning, and the labels it left out."""
    trained = model_config.get("trained")
    if not trained:
        return ""
    dropped = trained.get("labels_not_in_taxonomy")
    tuned = fine_tune_text(trained.get("fine_tune")).removesuffix("; ")
    return (
        f"classifier={trained['classifier']} ({candidate_scores(trained)})"
        + (f"; {tuned}" if tuned else "")
        + (f"; {dropped_labels_text(dropped)}" if dropped else "")
        + cascade_text(trained.get("cascade"))
    )


def classifier_line(trained: dict | None) -> str:
    """What a generation's training chose, in one line: `classifier logistic (held out:
    prototype 0.968, logistic 0.985; 529 texts, 484 labelled tickets); unknown below 0.191:
    92.4% of held-out texts answered, 96.1% of those right`."""
    if not trained:
        return "classifier prototype (built before training; fixed thresholds)"
    scores = candidate_scores(trained)
    rule = (
        "unknown never (the held-out answers meet the target precision as they are)"
        if trained["calibrated"] and trained["min_confidence"] <= -1
        else f"unknown below {trained['min_confidence']:.3f}"
        + ("" if trained["calibrated"] else f" or a margin under {trained['min_margin']:.3f}")
    )
    answered = (
        ""
        if trained["coverage"] is None
        else f": {trained['coverage']:.1%} of held-out texts answered, "
        f"{trained['answered_accuracy'] or 0:.1%} of those right"
        + (
            f" ({trained['discarded_correct']} right answers turned unknown)"
            if trained["discarded_correct"]
            else ""
        )
    )
    dropped = trained.get("labels_not_in_taxonomy")
    missing = trained.get("history_days_missing")
    return (
        fine_tune_text(trained.get("fine_tune"))
        + f"classifier {trained['classifier']} (held out: {scores or 'none'}; "
        f"{trained['training']} texts, {trained['labelled_tickets']} labelled tickets); "
        f"{calibration_text(trained)}{rule}{answered}"
        + (f"; {dropped_labels_text(dropped)}" if dropped else "")
        + (f"; trained without {', '.join(missing)} (no export)" if missing else "")
        + cascade_text(trained.get("cascade"))
    )


def cascade_text(plan: dict | None) -> str:
    """The cascade's threshold and its arithmetic: `; cascade to SmolLM2-135M-Instruct under
    confidence 0.899 (target 96.0% with probability 80%: 287 of 289 held-out texts right,
    bound 0.964; 4.8% escalated; the chat model 98.3% right there)`; empty without one."""
    if not plan:
        return ""
    guarantee = f"target {plan['target_accuracy']:.1%} with probability {1 - plan['delta']:.0%}"
    chat = plan.get("chat_accuracy")
    asked = (
        ""
        if chat is None
        else f"; {plan['chat_model']} right on {chat:.1%} of the {plan['labels']} held-out texts"
    )
    if plan["threshold"] is None:
        return f"; cascade: {plan['note']} ({guarantee}{asked})"
    return (
        f"; cascade to {plan['chat_model']} under confidence {plan['threshold']:.3f} "
        f"({guarantee}: {plan['right']} of {plan['labels']} held-out texts right, bound "
        f"{plan['lower_bound']:.3f}; {plan['escalated_share']:.1%} escalated{asked})"
    )


def fine_tune_text(tuned: dict | None) -> str:
    """How the encoder was fine-tuned, against the nightly window: `encoder fine-tuned (600
    of 600 steps, 12 intents, 7.9 min of a 240-min window); `; empty for a frozen one."""
    if not tuned:
        return ""
    ended = "" if tuned["stopped_by"] == "steps" else ", stopped by max_minutes"
    return (
        f"encoder fine-tuned ({tuned['steps']} of {tuned['steps_planned']} steps{ended}, "
        f"{tuned['intents']} intents, {tuned['seconds'] / 60:.1f} min of a "
        f"{tuned['window_minutes']:g}-min window); "
    )


def calibration_text(trained: dict) -> str:
    """How the confidences were calibrated, with the held-out expected calibration error
    before and after: `confidences calibrated (temperature 0.052; held-out calibration error
    0.412 -> 0.031); `; empty for a generation trained before calibration."""
    if trained.get("temperature") is None:
        if trained.get("ece_before") is None:
            return ""
        return (
            f"confidences the head's own (held-out calibration error {trained['ece_before']:.3f}); "
        )
    return (
        f"confidences calibrated (temperature {trained['temperature']:.3g}; held-out "
        f"calibration error {trained['ece_before']:.3f} -> {trained['ece_after']:.3f}); "
    )


WEAKEST = 3  # intents named by their recall on the labelled set


def evaluation_line(scores: dict) -> str:
    """The generation's figures on the labelled set in one line: accuracy, the share
    answered and accuracy on it, the weakest intents by recall and the worst confusions."""
    if not scores:
        return "labelled set: not scored yet (no review, or no evaluation set configured)"
    line = f"labelled set: accuracy {scores['accuracy']:.3f}, macro-F1 {scores['macro_f1']:.3f}"
    if "coverage" in scores:
        line += (
            f", {scores['coverage']:.1%} answered, {scores['answered_accuracy']:.1%} of those right"
        )
    if "ece" in scores:
        line += f", calibration error {scores['ece']:.3f}" + (
            f" ({scores['ece_uncalibrated']:.3f} uncalibrated)"
            if "ece_uncalibrated" in scores
            else ""
        )
    if "cascade_accuracy" in scores:
        line += (
            f"; with the cascade {scores['cascade_accuracy']:.3f} (target "
            f"{scores['cascade_target']:.3f}), {scores['cascade_escalated_share']:.1%} escalated"
            f" at {scores['cascade_cost_per_1k']:.4g} per 1,000"
        )
    per_intent = scores.get("per_intent") or {}
    weakest = sorted(per_intent.items(), key=lambda item: item[1]["recall"])[:WEAKEST]
    if weakest:
        line += "; weakest: " + ", ".join(
            f"{name} recall {f['recall']:.2f} precision {f['precision']:.2f} (of {f['support']})"
            for name, f in weakest
        )
    if scores.get("confusions"):
        line += "; confused: " + ", ".join(scores["confusions"])
    return line


def run_json(report: RunReport) -> dict[str, object]:
    """A day's run, as `run --json` prints it: every stage, the measures and the review."""
    return {**report.as_dict(), "day": report.partition.partition}


def run_lines(report: RunReport) -> list[str]:
    """A day's run in two lines: what it classified, kept, removed and failed, and the
    review."""
    day, measures = report.landing.summary, report.landing.measures
    return [
        f"run {report.run_id}: {report.partition.partition}: {day.tickets_classified} tickets "
        f"classified, {day.tickets_unchanged} unchanged, {day.tickets_removed} removed, "
        f"{len(day.failures)} failed; {duration(measures.wall_seconds)} wall-clock",
        *([escalation_line(day)] if day.tickets_escalated or day.tickets_answer_awaiting else []),
        report.review_line(),
    ]


def escalation_line(day) -> str:  # noqa: ANN001 - a TicketLandSummary
    """What the cascade sent to its chat model in a run: `cascade: 14 of 303 tickets
    classified now went to the chat model (4.6%); 14 answered; cost 0.0021 (0.0069 per 1,000
    tickets classified)`."""
    share = day.tickets_escalated / day.tickets_classified
    per_1k = day.escalation_cost / day.tickets_classified * 1000
    awaiting = (
        f"; {day.tickets_answer_awaiting} await the chat model's answer (the classifier's intent "
        "stands meanwhile; the next run collects them)"
        if day.tickets_answer_awaiting
        else ""
    )
    return (
        f"cascade: {day.tickets_escalated} of {day.tickets_classified} tickets classified now "
        f"went to the chat model ({share:.1%}); {day.tickets_chat_answered} answered; cost "
        f"{day.escalation_cost:.4g} ({per_1k:.4g} per 1,000 tickets classified){awaiting}"
    )


def day_report(product: TicketProduct, day: str, examples: int = 2) -> dict:
    """A day under the live generation: the intent mix, unknown rate, confidence spread,
    shift against the trailing days, and the most confident examples per intent."""
    pipeline = product.day(day)
    record = product.live().record
    rows = product.intents.day_rows(
        record.index_name, pipeline.day, ["ticket_id", "intent", "confidence", "input_text"]
    ).to_pylist()
    if not rows and pipeline.partition not in product.intents.days(record.index_name):
        raise NoLiveGenerationError(
            f"{pipeline.partition} is not classified under the live generation "
            f"{record.index_name}; materialise that partition of ticket_intents "
            f"(or batch-pipeline run --day {pipeline.partition})"
        )
    mix = IntentMix.of([r["intent"] for r in rows], [r["confidence"] for r in rows])
    mix = mix.with_shift(pipeline.trailing_counts(record.index_name))
    chosen: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: -r["confidence"]):
        picked = chosen.setdefault(row["intent"], [])
        if len(picked) < examples:
            picked.append(
                {
                    "ticket_id": row["ticket_id"],
                    "confidence": round(row["confidence"], 4),
                    "text": row["input_text"],
                }
            )
    counts = dict(sorted(mix.counts.items(), key=lambda item: (-item[1], item[0])))
    spread = {k: round(v, 4) for k, v in mix.confidence_spread().items()}
    failed = [
        f
        for f in product.tracking.list_failures(index=record.index_name)
        if f["doc_id"].startswith(f"{pipeline.partition}/")
    ]
    return {
        "day": pipeline.partition,
        "generation": record.index_name,
        "taxonomy_version": json.loads(record.model_config)["taxonomy_version"],
        "tickets": mix.total,
        "counts": counts,
        "unknown_rate": round(mix.unknown_rate or 0.0, 4),
        "confidence": {"mean": round(mix.mean_confidence or 0.0, 4), **spread},
        "shift": None if mix.shift is None else round(mix.shift, 4),
        "examples": chosen,
        "failed": len(failed),
        "classifier": product.trained(record),
        "evaluation": evaluation_figures(record),
    }


def evaluation_figures(record: GenerationRecord) -> dict:
    """The generation's own scores on the labelled set, as its last review kept them:
    accuracy, coverage, per-intent figures, the worst confusions ({} before a review)."""
    return json.loads(record.scores or "{}").get("own") or {}
