"""One day of ticket intent classification, stage by stage, in plain Python.

`DayPipeline` binds a day (a Dagster daily partition) to the ticket configuration and the
shared storage, and runs collect -> prepare -> plan -> execute -> land. Plan and execute are
the vector index's own stages; runs, failures and generations go to the same tracking store.

A generation is one taxonomy version under one model (and the classifier's thresholds): its
LanceDB table is `<tickets name>__<fingerprint>`. Editing the taxonomy starts a new generation
beside the live one; it is promoted when it holds every day the live one holds (backfill them)
and the evaluation gate finds it no worse than live. Rollback is the registry's.
"""

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import date, timedelta
from functools import cached_property

import numpy as np
import pyarrow.compute as pc

from batch_pipeline.config import ConfigError, PipelineConfig, TicketsConfig
from batch_pipeline.generations.evaluation import gate
from batch_pipeline.generations.lifecycle import (
    EmbedderFor,
    GenerationReview,
    NoLiveGenerationError,
)
from batch_pipeline.generations.registry import DROPPED, LIVE, GenerationRegistry
from batch_pipeline.inference.batching import PlanSettings
from batch_pipeline.inference.embedder import Embedder
from batch_pipeline.inference.models import ResolvedModel, load_tokenizer, resolve_model
from batch_pipeline.measures.progress import ProgressSink
from batch_pipeline.measures.run import MANUAL, RunMeasures
from batch_pipeline.names import generation_index
from batch_pipeline.pipeline import StageOutput
from batch_pipeline.stages.execute import PLAN_SECONDS, execute_plan, execute_record
from batch_pipeline.stages.plan import plan_stale_chunks
from batch_pipeline.state.staging import STAGE_SECONDS, StagePath, read_table, stage_summary
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets import (
    TICKET_COLLECT,
    TICKET_EXECUTE,
    TICKET_LAND,
    TICKET_PLAN,
    TICKET_PREPARE,
)
from batch_pipeline.tickets.classify import IntentClassifier, embed_prototypes
from batch_pipeline.tickets.collect import COLLECTED_AT, OK, collect_tickets, collected_failures
from batch_pipeline.tickets.evaluation import (
    classification_scores,
    eval_set_version,
    load_labelled_tickets,
)
from batch_pipeline.tickets.exports import TicketExport, make_export
from batch_pipeline.tickets.intent_store import IntentStore
from batch_pipeline.tickets.land import DayTarget, TicketLandSummary, land_day
from batch_pipeline.tickets.mix import TRAILING_DAYS, IntentMix
from batch_pipeline.tickets.prepare import prepare_inputs, ticket_input
from batch_pipeline.tickets.taxonomy import Taxonomy, load_taxonomy, parse_taxonomy


def tickets_config(config: PipelineConfig) -> TicketsConfig:
    if config.tickets is None:
        raise ConfigError("tickets: not configured (add a `tickets:` section; see README)")
    return config.tickets


def due_days(settings: TicketsConfig, today: date | None = None) -> list[str]:
    """Every daily partition key, from `start_date` to yesterday, oldest first."""
    first = date.fromisoformat(settings.start_date)
    last = (today or date.today()) - timedelta(days=1)
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def parse_day(value: str | date, settings: TicketsConfig) -> date:
    """A partition key as a date, checked against `tickets.start_date`."""
    try:
        day = value if isinstance(value, date) else date.fromisoformat(str(value))
    except ValueError:
        raise ConfigError(f"{value!r} is not a day (YYYY-MM-DD)") from None
    if day < date.fromisoformat(settings.start_date):
        raise ConfigError(f"{day} is before tickets.start_date ({settings.start_date})")
    return day


def _digest(payload: dict) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


class TicketProduct:
    """What every day shares: the configuration, the taxonomy, the model, the generations."""

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        tracking: TrackingStore | None = None,
        store: VectorStore | None = None,
        s3_client: object | None = None,
    ) -> None:
        self.config = config
        self.settings = tickets_config(config)
        self.storage = storage
        self.tracking = tracking or TrackingStore(storage.tracking_url)
        self.store = store or VectorStore(storage.lancedb_uri, storage.storage_options)
        self.intents = IntentStore(self.store)
        self.registry = GenerationRegistry(self.tracking)
        self.staging = storage.staging()
        self.s3_client = s3_client

    @property
    def name(self) -> str:
        return self.settings.name

    @cached_property
    def model(self) -> ResolvedModel:
        return resolve_model(self.config.model)

    @cached_property
    def taxonomy(self) -> Taxonomy:
        return load_taxonomy(self.settings.taxonomy)

    @cached_property
    def model_fingerprint(self) -> str:
        """Everything that changes a ticket's vector: the model and the input cut."""
        return _digest({"model": self.model.identity(), "max_tokens": self.settings.max_tokens})

    @cached_property
    def fingerprint(self) -> str:
        """The generation: the vectors' fingerprint, the taxonomy and the thresholds."""
        s = self.settings
        return _digest(
            {
                "model": self.model_fingerprint,
                "taxonomy": self.taxonomy.version,
                "min_confidence": s.min_confidence,
                "min_margin": s.min_margin,
            }
        )

    @property
    def index(self) -> str:
        return generation_index(self.name, self.fingerprint)

    @cached_property
    def export(self) -> TicketExport:
        return make_export(self.settings.source, self.settings.timezone, self.s3_client)

    def day(self, value: str | date) -> "DayPipeline":
        return DayPipeline(self, parse_day(value, self.settings))

    def partition_days(self, today: date | None = None) -> list[str]:
        """Every daily partition key, from `start_date` to yesterday."""
        return due_days(self.settings, today)

    # -------------------------------------------------------------- generations

    def generation_config(self) -> dict:
        """What a generation is built from, kept on its record (so the live generation's
        classifier can be rebuilt after the configuration moved on)."""
        s = self.settings
        return {
            "model": self.config.model.model_dump(mode="json"),
            "model_fingerprint": self.model_fingerprint,
            "max_tokens": s.max_tokens,
            "taxonomy_version": self.taxonomy.version,
            "taxonomy": self.settings.taxonomy.read_text(encoding="utf-8"),
            "min_confidence": s.min_confidence,
            "min_margin": s.min_margin,
        }

    def record(self) -> GenerationRecord:
        return self.registry.ensure(
            self.name, self.fingerprint, self.index, self.generation_config()
        )

    def live(self) -> GenerationRecord | None:
        return self.registry.live(self.name)

    def same_model_generations(self) -> list[str]:
        """Tables of this product's generations whose vectors this model computed."""
        return [
            g.index_name
            for g in self.registry.list_all(self.name)
            if g.state != DROPPED
            and json.loads(g.model_config).get("model_fingerprint") == self.model_fingerprint
        ]

    def classifier_for(
        self, record: GenerationRecord, embedder: Callable[[], Embedder]
    ) -> IntentClassifier:
        """A generation's classifier; its prototypes are cached in staging once embedded."""
        built = json.loads(record.model_config)
        taxonomy = parse_taxonomy(built["taxonomy"])
        cache = self.staging.root / "prototypes" / f"{record.fingerprint}.npy"
        if cache.is_file():
            prototypes = np.frombuffer(cache.read_bytes(), dtype=np.float32).reshape(
                len(taxonomy.intents), -1
            )
        else:
            prefix = self.model_for(record).document_prefix  # the model that built it
            prototypes = embed_prototypes(taxonomy, embedder(), prefix)
            cache.write_bytes(prototypes.astype(np.float32).tobytes())
        return IntentClassifier(
            taxonomy.names, prototypes, built["min_confidence"], built["min_margin"]
        )

    def classifier(self, embedder: Callable[[], Embedder]) -> IntentClassifier:
        return self.classifier_for(self.record(), embedder)

    def classify_texts(
        self,
        texts: list[tuple[str, str]],
        embedder: Embedder,
        record: GenerationRecord | None = None,
    ) -> list:
        """Predictions for (subject, body) pairs, through the same input cut as a day's
        tickets; under `record`'s generation (default: this configuration's)."""
        record = record or self.record()
        model = self.model_for(record)
        max_tokens = json.loads(record.model_config)["max_tokens"]
        tokenizer = load_tokenizer(model.path)
        inputs = [
            ticket_input(tokenizer, s, b, max_tokens, model.document_prefix) for s, b in texts
        ]
        classifier = self.classifier_for(record, lambda: embedder)
        return classifier.classify(embedder.embed(inputs))

    def scores(self, record: GenerationRecord, embedder_for: EmbedderFor) -> dict | None:
        """A generation's accuracy and macro-F1 on the labelled set (None without one);
        cached on its record per version of the set."""
        evaluation = self.settings.evaluation
        if evaluation is None:
            return None
        version = eval_set_version(evaluation.path)
        cached = json.loads(record.scores or "{}")
        if cached.get("eval_set") == version and "candidate" in cached:
            return cached["candidate"]
        embedder = embedder_for(self.model_for(record))
        taxonomy = parse_taxonomy(json.loads(record.model_config)["taxonomy"])
        labelled = load_labelled_tickets(evaluation.path, taxonomy.names)
        predictions = self.classify_texts([(t.subject, t.body) for t in labelled], embedder, record)
        scores = classification_scores([t.label for t in labelled], [p.intent for p in predictions])
        self.registry.update(
            self.name,
            record.fingerprint,
            scores=json.dumps({"eval_set": version, "candidate": scores}),
        )
        return scores

    def model_for(self, record: GenerationRecord) -> ResolvedModel:
        """The model a generation was built with."""
        from batch_pipeline.config import ModelConfig

        return resolve_model(ModelConfig.model_validate(json.loads(record.model_config)["model"]))

    def reader_generation(self) -> GenerationRecord:
        """What readers use: the live generation."""
        live = self.live()
        if live is None:
            raise NoLiveGenerationError(
                f"{self.name!r} has no live generation yet; classify a day first "
                "(make demo, or batch-pipeline run --day YYYY-MM-DD)"
            )
        return live

    def day_report(self, day: str, examples: int = 2) -> dict:
        """A day under the live generation: the intent mix, unknown rate, confidence spread,
        shift against the trailing days, and the most confident examples per intent."""
        pipeline = self.day(day)
        record = self.reader_generation()
        rows = self.intents.day_rows(
            record.index_name, pipeline.day, ["ticket_id", "intent", "confidence", "input_text"]
        ).to_pylist()
        if not rows and pipeline.partition not in self.intents.days(record.index_name):
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
            for f in self.tracking.list_failures(index=record.index_name)
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
        }

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        """Gate this configuration's generation: complete (it holds every day the live one
        holds), at least `min_accuracy`, and no worse than live within the tolerance; promote
        it if so. Unchanged since the last review, the last review stands (no model loads)."""
        record = self.record()
        live = self.live()
        days = self.intents.days(self.index)
        live_days = self.intents.days(live.index_name) if live is not None else []
        complete = bool(days) and set(days) >= set(live_days)
        evaluation = self.settings.evaluation
        key = json.dumps(
            {
                "days": len(days),
                "live": live.index_name if live else None,
                "live_days": len(live_days),
                "eval_set": eval_set_version(evaluation.path) if evaluation else None,
            },
            sort_keys=True,
        )
        rows = self.store.count_rows(self.index)
        self.registry.update(
            self.name, self.fingerprint, complete=complete, rows=rows, documents=rows
        )
        if not force and record.decision is not None and record.reviewed_key == key:
            decision, _, reason = record.decision.partition(": ")
            return self._review(
                decision, f"{reason} (unchanged since the last review)", evaluated=False
            )
        candidate = self.scores(record, embedder_for)
        live_scores = (
            self.scores(live, embedder_for)
            if live is not None and live.fingerprint != self.fingerprint
            else None
        )
        warnings: tuple[str, ...] = ()
        if record.state == LIVE:
            decision, reason = "live", "this generation is live"
        else:
            verdict = gate(
                complete, candidate, live_scores, evaluation.tolerance if evaluation else 0.0
            )
            allowed, reason, warnings = verdict.allowed, verdict.reason, verdict.warnings
            if not complete:
                missing = sorted(set(live_days) - set(days))
                reason = (
                    f"not complete: holds {len(days)} of the live generation's days; "
                    f"backfill {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
                )
            floor = evaluation.min_accuracy if evaluation else 0.0
            if candidate is not None and candidate["accuracy"] < floor:
                allowed = False
                reason = f"refused: accuracy {candidate['accuracy']:.4f} < min_accuracy {floor}"
            if allowed:
                self.registry.promote(
                    self.name, self.fingerprint, reason, "pipeline", already_live_ok=True
                )
            decision = "promoted" if allowed else "refused"
        scores = {"candidate": candidate} if candidate else {}
        if live_scores:
            scores["live"] = live_scores
        self.registry.update(
            self.name, self.fingerprint, decision=f"{decision}: {reason}", reviewed_key=key
        )
        return self._review(decision, reason, scores, warnings)

    def _review(
        self,
        decision: str,
        reason: str,
        scores: dict | None = None,
        warnings: tuple[str, ...] = (),
        evaluated: bool = True,
    ) -> GenerationReview:
        record = self.record()
        if scores is None:
            cached = json.loads(record.scores or "{}")
            scores = {"candidate": cached["candidate"]} if "candidate" in cached else {}
        return GenerationReview.of(
            record, self.live(), decision, reason, scores, warnings, evaluated
        )


class DayPipeline:
    """The engine for one day of tickets (one daily partition)."""

    def __init__(self, product: TicketProduct, day: date) -> None:
        self.product = product
        self.day = day
        self.partition = day.isoformat()

    @property
    def staging_key(self) -> str:
        """The day's folder in staging: under the product's name, apart from collections."""
        return f"{self.product.name}/{self.partition}"

    def path(self, run_id: str, stage_file: str) -> StagePath:
        return self.product.staging.stage_file(self.staging_key, run_id, stage_file)

    def _same_model_rows(self, columns: list[str]) -> Iterator:
        """These columns of the day's rows in every generation of this model."""
        for index in self.product.same_model_generations():
            rows = self.product.intents.day_rows(index, self.day, columns)
            if rows.num_rows:
                yield rows

    def known_inputs(self) -> set[str]:
        """The day's input hashes this model already holds a vector for (no vectors read)."""
        return {
            h
            for rows in self._same_model_rows(["input_hash"])
            for h in rows["input_hash"].to_pylist()
        }

    def known_vectors(self) -> dict[str, np.ndarray]:
        """Vectors this model already computed for the day's inputs, by input hash."""
        found: dict[str, np.ndarray] = {}
        for rows in self._same_model_rows(["input_hash", "vector"]):
            vectors = pc.list_flatten(rows["vector"]).to_numpy().reshape(rows.num_rows, -1)
            found.update(zip(rows["input_hash"].to_pylist(), vectors, strict=True))
        return found

    # ------------------------------------------------------------------- stages

    def collect(self, run_id: str) -> StageOutput:
        self.product.export.check()
        out = self.path(run_id, TICKET_COLLECT.file)
        return StageOutput(out, collect_tickets(self.product.export, self.day, out))

    def prepare(self, run_id: str, collected: StagePath) -> StageOutput:
        out = self.path(run_id, TICKET_PREPARE.file)
        model = self.product.model
        summary = prepare_inputs(
            collected,
            out,
            lambda: load_tokenizer(model.path),
            self.product.settings.max_tokens,
            self.known_inputs,
            model.document_prefix,
        )
        return StageOutput(out, summary)

    def plan(
        self, run_id: str, inputs: StagePath, settings: PlanSettings, dtype_bytes: int = 4
    ) -> StageOutput:
        out = self.path(run_id, TICKET_PLAN.file)
        return StageOutput(
            out, plan_stale_chunks(inputs, out, settings, self.product.model, dtype_bytes)
        )

    def execute(
        self,
        run_id: str,
        plan: StagePath,
        get_runner: Callable[[], Embedder],
        progress: ProgressSink | None = None,
        progress_interval: float = 15.0,
    ) -> StageOutput:
        out = self.path(run_id, TICKET_EXECUTE.file)
        checkpoints = self.product.staging.checkpoint_dir(
            self.staging_key, self.product.model_fingerprint
        )
        summary = execute_plan(
            plan,
            out,
            get_runner,
            self.product.model.embedding_dimension,
            checkpoints,
            progress=progress,
            progress_interval=progress_interval,
        )
        return StageOutput(out, summary)

    def trailing_counts(self, index: str | None = None) -> list[dict[str, int]]:
        """The intent counts of the trailing days a generation (default: this
        configuration's) holds."""
        counts = []
        for back in range(1, TRAILING_DAYS + 1):
            day = self.day - timedelta(days=back)
            rows = self.product.intents.day_rows(index or self.product.index, day, ["intent"])
            if rows.num_rows:
                counts.append(dict(Counter(rows["intent"].to_pylist())))
        return counts

    def land(
        self,
        run_id: str,
        collected: StagePath,
        inputs: StagePath,
        embeddings: StagePath,
        get_runner: Callable[[], Embedder],
        trigger: str = MANUAL,
        retries: int = 0,
        started_at: float | None = None,
    ) -> TicketLandSummary:
        """Classify and write the day, record its failures and the run with its measures."""
        land_started = time.perf_counter()
        product = self.product
        tracking = product.tracking
        index = product.index
        record = product.record()
        collected_rows = read_table(
            collected, ["ticket_id", "day", "channel", "status", "error_reason", "error_message"]
        )
        channels = dict(
            zip(
                collected_rows["ticket_id"].to_pylist(),
                collected_rows["channel"].to_pylist(),
                strict=True,
            )
        )
        target = DayTarget(
            index,
            self.partition,
            run_id,
            product.model_fingerprint,
            product.taxonomy.version,
            product.model.embedding_dimension,
        )
        with tracking.landing_lease(index, owner=run_id):
            table = product.store.open(index)
            version_before = table.version if table is not None else 0
            tracking.record_run_started(
                run_id,
                index,
                model_name=product.model.name,
                fingerprint=product.fingerprint,
                table_version_before=version_before,
            )
            summary = land_day(
                product.intents,
                target,
                inputs,
                embeddings,
                self.known_vectors,
                lambda: product.classifier_for(record, get_runner),
                channels,
            )
            failures = collected_failures(collected_rows) + summary.failures
            tracking.replace_failures(index, f"{self.partition}/", failures, run_id)
        summary.failures = failures
        summary.mix = summary.mix.with_shift(self.trailing_counts())
        executed = execute_record(embeddings)
        ok = sum(1 for s in collected_rows["status"].to_pylist() if s == OK)
        attempted = collected_rows.num_rows
        seconds = {
            TICKET_COLLECT.name: stage_summary(collected).get(STAGE_SECONDS),
            TICKET_PREPARE.name: stage_summary(inputs).get(STAGE_SECONDS),
            TICKET_PLAN.name: executed.get(PLAN_SECONDS),
            TICKET_EXECUTE.name: executed.get(STAGE_SECONDS),
            TICKET_LAND.name: time.perf_counter() - land_started,
        }
        measures = RunMeasures.from_execute(
            executed,
            product.config,
            trigger,
            partition=self.partition,
            started_at=started_at
            or float(stage_summary(collected).get(COLLECTED_AT) or time.time()),
            finished_at=time.time(),
            docs_attempted=attempted,
            docs_failed=len(failures),
            retries=retries,
            completeness=summary.mix.total / ok if ok else 1.0,
            partition_inputs=ok,
            stage_seconds={k: round(float(v), 3) for k, v in seconds.items() if v is not None},
        )
        summary.measures = measures
        tracking.record_run(
            run_id,
            index,
            model_name=product.model.name,
            fingerprint=product.fingerprint,
            docs_landed=summary.tickets_classified + summary.tickets_unchanged,
            docs_deleted=summary.tickets_removed,
            chunks_embedded=int(executed.get("inputs", 0)),
            chunks_reused=summary.tickets_unchanged,
            chunks_removed=summary.tickets_removed,
            table_version=summary.table_version,
            table_version_before=version_before,
            **measures.record(),
        )
        product.staging.checkpoint_dir(self.staging_key, product.model_fingerprint).delete()
        product.staging.prune_runs(
            self.staging_key,
            {run_id, "checkpoints"},
            product.config.maintenance.staging_runs_kept,
            finished=lambda run: tracking.run_finished(index, run),
            unfinished_grace_seconds=product.config.maintenance.unlanded_run_retention_hours * 3600,
        )
        return summary

    def run(
        self,
        run_id: str,
        runner: Embedder | Callable[[], Embedder],
        plan_settings: PlanSettings | None = None,
        trigger: str = MANUAL,
        progress: ProgressSink | None = None,
    ) -> dict[str, object]:
        """All five stages of the day, under the day's lease; their summaries by stage."""
        started_at = time.time()
        get_runner = runner if callable(runner) else (lambda: runner)
        with self.product.tracking.partition_lease(self.staging_key, owner=run_id):
            collected = self.collect(run_id)
            inputs = self.prepare(run_id, collected.path)
            plan = self.plan(run_id, inputs.path, plan_settings or PlanSettings())
            embeddings = self.execute(run_id, plan.path, get_runner, progress)
            landed = self.land(
                run_id,
                collected.path,
                inputs.path,
                embeddings.path,
                get_runner,
                trigger=trigger,
                started_at=started_at,
            )
        return {
            TICKET_COLLECT.name: collected.summary,
            TICKET_PREPARE.name: inputs.summary,
            TICKET_PLAN.name: plan.summary,
            TICKET_EXECUTE.name: embeddings.summary,
            TICKET_LAND.name: landed,
        }
