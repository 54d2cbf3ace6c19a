"""The document briefs of one collection, and one partition's run of them.

`BriefProduct` binds a collection's `briefs:` settings to its generator: the prompt file, the
output schema, the sampling and the chat model make its fingerprint, and so its generation,
`<collection>_briefs__<fingerprint>`. `BriefPartition` runs one partition on the run frame:
collect is the collection's own, prepare renders the stale documents' prompts, plan and
execute are the chat-model stages, land writes the typed rows.
"""

from collections.abc import Callable
from datetime import timedelta
from functools import cached_property

import numpy as np

from batch_pipeline.briefs import INDEX, NAME
from batch_pipeline.briefs.partition import BriefPartition
from batch_pipeline.briefs.questions import (
    QUESTION_COLUMNS,
    LiveBriefs,
    QuestionRows,
    land_questions,
    question_scores,
)
from batch_pipeline.briefs.review import BriefScorer, CoversCollectionRule
from batch_pipeline.briefs.store import BriefStore
from batch_pipeline.config import (
    BRIEF_COLUMNS,
    BRIEF_PLACEHOLDERS,
    BriefsConfig,
    PipelineConfig,
)
from batch_pipeline.config.output_schema import OutputSchema, load_output_schema
from batch_pipeline.config.prompt import PromptTemplate, load_prompt
from batch_pipeline.declaration import CollectionDocuments, input_product
from batch_pipeline.executors import Capabilities, ExecutorChoice
from batch_pipeline.executors.generation import GenerationExecutor, generation_executor
from batch_pipeline.executors.registry import GENERATE, capabilities
from batch_pipeline.generations.evaluation import index_model
from batch_pipeline.generations.registry import BUILDING, CANDIDATE, LIVE
from batch_pipeline.generations.review import (
    EmbedderFor,
    NoLiveGenerationError,
    ReviewedGenerations,
)
from batch_pipeline.inference.chat_models import ChatModel
from batch_pipeline.inference.generator import Generator, Sampling
from batch_pipeline.inference.models import ResolvedModel, resolve_model
from batch_pipeline.iterables import batched
from batch_pipeline.names import briefs_product_name, question_index
from batch_pipeline.stages.prompt_plan import PromptPlanSettings
from batch_pipeline.state.retrieval import VectorParams
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.table_indexes import IndexHealth, TableIndexes
from batch_pipeline.state.tracking import GenerationRecord, TrackingStore
from batch_pipeline.state.vector_store import VectorStore, in_filter

DOCUMENT_GUARD = "control-tokens-1"  # how documents are made safe for a prompt: its version


class BriefProduct(ReviewedGenerations):
    """A collection's document briefs (see the module docstring). `generator` is the chat
    model the runs use (its engine starts only when something is generated);
    `documents_for` gives a partition's documents: its source and collect."""

    def __init__(
        self,
        config: PipelineConfig,
        storage: StorageLocations,
        collection: str,
        generator: Generator,
        documents_for: Callable[[str], CollectionDocuments],
        plan_settings: PromptPlanSettings | None = None,
        tracking: TrackingStore | None = None,
        store: VectorStore | None = None,
        execution: ExecutorChoice | None = None,
    ) -> None:
        # which generate executor runs the plan, with its settings (the family's default)
        self.execution = execution or ExecutorChoice()
        self.config = config
        self.storage = storage
        self.collection_name = collection
        self.generator = generator
        self.plan_settings = plan_settings or PromptPlanSettings()
        self.tracking = tracking or TrackingStore(storage.tracking_url)
        self.store = store or VectorStore(storage.lancedb_uri, storage.storage_options)
        self.documents_for = documents_for
        self.briefs = BriefStore(self.store)

    @cached_property
    def collection(self):  # noqa: ANN201 - a CollectionConfig
        return self.config.configured(self.collection_name)

    @cached_property
    def settings(self) -> BriefsConfig:
        return self.config.collection_section(
            self.collection_name, "briefs", "briefs", " (prompt, output_schema)"
        )

    @property
    def name(self) -> str:
        return briefs_product_name(self.collection_name)

    @cached_property
    def template(self) -> PromptTemplate:
        return load_prompt(self.settings.prompt, BRIEF_PLACEHOLDERS)

    @cached_property
    def output(self) -> OutputSchema:
        return load_output_schema(self.settings.output_schema, BRIEF_COLUMNS)

    @property
    def sampling(self) -> Sampling:
        settings = self.settings  # greedy: a rerun repeats itself
        return Sampling(
            max_tokens=settings.max_tokens, repetition_penalty=settings.repetition_penalty
        )

    @property
    def model(self) -> ChatModel:
        return self.generator.model

    @property
    def invalid_output_tries(self) -> int:
        """How many invalid outputs under one key a document gets before it waits for a new
        key (its content, the prompt, the schema or the model changed): one where a rerun
        gives the same output, two where it may not. Greedy decoding in float32 gave the
        same output in any batch; in bfloat16 (and float16) an output depends on the batch
        it ran in (`python -m batch_pipeline.bench.rerun`: 8 of 40 differed, and 2 changed
        validity), and so may a provider's."""
        if self.executor_capabilities.provider_batches:
            return 2
        return 1 if getattr(self.generator, "dtype", "float32") == "float32" else 2

    @property
    def executor_capabilities(self) -> Capabilities:
        """What the chosen generate executor declares it can do."""
        return capabilities(GENERATE, self.execution.name)

    @property
    def executor(self) -> GenerationExecutor:
        """The chat model's prompt plan and generation, under the briefs' sampling and
        output schema, on the generate executor `execution` names (`executors.registry`):
        its outputs, and so its generation, are the same whichever runs it (a provider's
        batches' ledger is the frame's)."""
        return generation_executor(
            self.execution, self.generator, self.sampling, self.output.schema, self.plan_settings
        )

    @property
    def served_model(self) -> str | None:
        """The provider's model, where it is not the chat model the plan counts tokens with:
        its briefs are another generation's."""
        api = self.execution.batch_api
        if not self.executor_capabilities.provider_batches or api is None:
            return None
        return api.served_model(self.model.name)

    def generation_config(self) -> dict:
        """What decides a brief besides its document: the generation's fingerprint hashes it."""
        return {
            "prompt_version": self.template.version,
            "schema_version": self.output.version,
            "sampling": self.sampling.identity(),
            "document_tokens": self.settings.document_tokens,
            "model": self.model.name,
            "model_fingerprint": self.model.fingerprint,
            # documents' control tokens are broken before rendering (text.control_tokens)
            "document_guard": DOCUMENT_GUARD,
            **({"served_model": self.served_model} if self.served_model else {}),
        }

    def partition(self, key: str) -> "BriefPartition":
        return BriefPartition(self, key)

    # -------------------------------------------------------------- generations

    @cached_property
    def embedding_model(self) -> ResolvedModel:
        """The collection's embedding model: faithfulness is measured with it."""
        return resolve_model(self.config.model)

    @cached_property
    def index_product(self) -> str:
        """The collection's vector index, a declared input (`ProductKind.inputs`): the
        briefs measure faithfulness against its live generation and write their question
        rows beside its generations (a declared feed)."""
        return input_product(self.config, NAME, INDEX, self.collection_name)

    def live_index(self) -> str | None:
        """The collection's live index, or None: faithfulness is measured against it."""
        live = self.registry.live(self.index_product)
        if live is None or not self.store.has_table(live.index_name):
            return None
        return live.index_name

    def document_vectors(self, index: str, doc_ids: list[str]) -> tuple[list[str], np.ndarray]:
        """These documents' unit vectors in `index` (the mean of each one's chunks), and the
        ids that have any, in id order; read `ID_BATCH` documents at a time."""
        sums: dict[str, np.ndarray] = {}
        for batch in batched(doc_ids):
            rows = self.store.scan(index, ["doc_id", "vector"], where=in_filter("doc_id", batch))
            for doc_id, vector in zip(
                rows["doc_id"].to_pylist(),
                rows["vector"].to_numpy(zero_copy_only=False),
                strict=True,
            ):
                vector = np.asarray(vector, dtype=np.float32)
                sums[doc_id] = sums[doc_id] + vector if doc_id in sums else vector
        order = sorted(sums)
        if not order:
            return [], np.zeros((0, 0), dtype=np.float32)
        matrix = np.stack([sums[d] for d in order])
        matrix /= np.linalg.norm(matrix, axis=1, keepdims=True).clip(min=1e-12)
        return order, matrix

    # its generations: the frame's reviewer, with its rule and scorer
    def completeness_rule(self) -> CoversCollectionRule:
        """Briefs every document of the collection's last full pass."""
        return CoversCollectionRule(self.tracking, self.invalid_output_tries)

    def scorer(self) -> BriefScorer:
        """Valid share, audience accuracy, faithfulness."""
        return BriefScorer(
            self.settings,
            self.briefs,
            self.tracking,
            self.embedding_model,
            self.live_index,
            self.document_vectors,
            self.output.enums.get("audience"),
        )

    @property
    def no_live_hint(self) -> str:
        run = f"batch-pipeline run --collection {self.collection_name} --kind briefs"
        return f"run the briefs first ({run})"

    # ------------------------------------------------------- questions as rows

    def question_generations(self) -> list[GenerationRecord]:
        """The collection's index generations that get question rows: the live one, and
        any being built or waiting as a candidate (so search has them the moment it goes
        live; the index generations' own gate compares chunks only)."""
        return [
            record
            for record in self.registry.list_all(self.index_product)
            if record.state in (BUILDING, CANDIDATE, LIVE)
            and self.store.has_table(record.index_name)
        ]

    def live_questions(self) -> LiveBriefs | None:
        """The live briefs the question rows are made from; None while none is live."""
        try:
            live = self.live()
        except NoLiveGenerationError:
            return None
        return LiveBriefs(
            live.index,
            self.store.count_rows(live.index),
            lambda: self.store.scan_batches(live.index, list(QUESTION_COLUMNS)),
        )

    def _keep_indexes_current(self, table_name: str) -> IndexHealth:
        """The question rows get the collection's indexes, as its chunks do; their health as
        this upkeep left them (what the question rows' `indexes_current` check reads)."""
        table = self.store.open(table_name)
        if table is None:
            return IndexHealth({})
        retention = timedelta(hours=self.config.maintenance.version_retention_hours)
        settings = self.collection.index
        indexes = TableIndexes(table, table_name, settings, self.tracking, retention)
        upkeep = indexes.keep_current()
        failed = {f"{table_name}.{name}": why for name, why in upkeep.failed.items()}
        return IndexHealth({table_name: indexes.states()}, failed)

    def land_questions(self, embedder_for: EmbedderFor, run_id: str) -> QuestionRows:
        """With `index_questions`, bring every index generation's question rows to the live
        briefs (a rerun embeds nothing), then measure the live index's retrieval with and
        without them on the collection's evaluation set, in this one run."""
        if not self.settings.index_questions:
            return QuestionRows("off: briefs.index_questions is false")
        briefs = self.live_questions()
        if briefs is None:
            return QuestionRows("waiting: no brief generation is live yet")
        fields = dict(self.collection.metadata.fields)
        summaries = []
        health = IndexHealth({})
        for record in self.question_generations():
            model = index_model(record)
            table = question_index(record.index_name)
            # one land at a time per question table (each shard's run lands the collection's
            # questions: the second finds nothing to do), and its indexes read as it left them
            with self.tracking.landing_lease(table, owner=run_id):
                summaries.append(
                    land_questions(
                        self.store,
                        record.index_name,
                        briefs,
                        embedder_for(model),
                        model,
                        run_id,
                        fields,
                    )
                )
                health = health.with_(self._keep_indexes_current(table))
        live = self.registry.live(self.index_product)
        if live is None:
            return QuestionRows("landed", summaries, index_health=health)
        scores = None
        if self.collection.evaluation is not None:
            model = index_model(live)
            scores = question_scores(
                self.store,
                live,
                self.collection.evaluation,
                embedder_for(model),
                model.query_prefix,
                self.collection.index.search,
                VectorParams.of(self.collection.index.vector),
            )
        table = question_index(live.index_name)
        rows = self.store.count_rows(table)
        return QuestionRows("landed", summaries, scores, rows, table, health)
