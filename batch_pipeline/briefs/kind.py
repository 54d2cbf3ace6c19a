"""The document briefs, declared: one product (`<collection>_briefs`) per collection with
`briefs:`, run by `BriefPartition` on the generation executor over the collection's own
collect, complete when it briefs every document of its last full pass, scored by valid
share, audience accuracy and faithfulness."""

from collections.abc import Callable
from dataclasses import replace
from typing import ClassVar

from batch_pipeline.briefs import INDEX, NAME, report
from batch_pipeline.briefs.partition import BriefPartition
from batch_pipeline.briefs.product import BriefProduct
from batch_pipeline.briefs.review import BriefScorer, CoversCollectionRule
from batch_pipeline.config import BriefsConfig, ConfigError, PipelineConfig
from batch_pipeline.declaration import (
    CollectionDocuments,
    Feed,
    Lines,
    ProductEnv,
    ProductFace,
    ProductKind,
    ProductTarget,
    RunReport,
)
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.executors.generation import parallel_problem
from batch_pipeline.executors.registry import GENERATE, check_executor
from batch_pipeline.generations.review import EmbedderFor
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.chat_models import resolve_chat_model
from batch_pipeline.inference.generator import Generator
from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for
from batch_pipeline.names import QUESTIONS_SUFFIX, briefs_product_name
from batch_pipeline.runs.partition import StagedPartition
from batch_pipeline.runs.request import Engine
from batch_pipeline.stages.prompt_plan import PromptPlanSettings, plan_settings_for
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore


class DocumentBriefs(ProductFace):
    """A collection's document briefs, as a product."""

    report_kind: ClassVar[str] = report.REPORT_KIND
    status_lines: ClassVar[Lines] = staticmethod(report.status_lines)
    health_line = staticmethod(report.health_line)
    product: BriefProduct

    def engine_loader(
        self, partition: StagedPartition, embedder_for: EmbedderFor
    ) -> Callable[[], Engine]:
        """The briefs' chat model (its engine starts only if there is work)."""
        return lambda: self.product.generator

    def after_review(self, embedder_for: EmbedderFor, run_id: str) -> dict[str, object]:
        """The live briefs' questions, landed as retrieval rows after the review (they follow
        live), with the retrieval they measured."""
        return {"questions": self.product.land_questions(embedder_for, run_id).metadata()}

    def run_json(self, run: RunReport) -> dict[str, object]:
        return report.run_json(self.product, run)

    def run_lines(self, run: RunReport) -> list[str]:
        return report.run_lines(self.product, run)

    def run_groups(self) -> list[list[str]]:
        """The collection's partitions, one group: the briefs run on the collection, or on
        each of its shards."""
        product = self.product
        return [
            list(dict.fromkeys([product.collection_name, *product.collection.partition_keys()]))
        ]

    def status(self) -> dict[str, object]:
        return report.product_status(self.product)

    def health(self) -> dict[str, object]:
        return report.product_health(self.product)


def brief_product(
    config: PipelineConfig,
    storage: StorageLocations,
    collection: str,
    tracking: TrackingStore,
    store: VectorStore,
    documents_for: Callable[[str], CollectionDocuments],
    generator: Generator | None = None,
    plan_settings: PromptPlanSettings | None = None,
    device: str = "auto",
    dtype: str = "auto",
    execution: ExecutorChoice | None = None,
    engine_options: dict[str, int] | None = None,
) -> BriefProduct:
    """A collection's briefs, its documents read through `documents_for` (the collection's
    own partitions). Without `generator`, vLLM on the generation resource's defaults: the
    shipped chat model, `dtype: auto` decided (and cached) here; its engine starts only if
    there is work. `execution` names the generate executor that runs the plan, with its
    settings (the Batch API's); `engine_options` set the engine's other settings
    (`EngineSettings`: `tensor_parallel_size`, ...)."""
    if generator is None:
        model = resolve_chat_model(None, storage.home)
        cache = storage.home / CALIBRATION_FILE
        engine = engine_settings_for(model, device, dtype, cache, **(engine_options or {}))
        generator = VllmGenerator(model, engine)
        plan_settings = plan_settings or plan_settings_for(engine)
    return BriefProduct(
        config,
        storage,
        collection,
        generator,
        documents_for,
        plan_settings,
        tracking,
        store,
        execution,
    )


def targets(config: PipelineConfig) -> list[ProductTarget]:
    """The briefs of every collection that has `briefs:`."""
    return [
        ProductTarget(briefs_product_name(c.name), NAME, c.name)
        for c in config.collections
        if c.briefs is not None
    ]


def open_briefs(env: ProductEnv, target: ProductTarget) -> DocumentBriefs:
    """A collection's briefs on the executor `env.execution` names (a ConfigError, naming
    the setting as its caller spells it, for an executor, a parallel size or a Batch API
    setting it cannot take), refused before any stage runs."""
    choice = env.execution
    executor = check_executor(GENERATE, choice.name, choice.spelled("executor"))
    options = {k: v for k, v in choice.engine_options.items() if v and v > 1}
    if options and env.generator is None:
        sizes = {
            f"{side}_parallel_size": options.get(f"{side}_parallel_size", 1)
            for side in ("tensor", "data")
        }
        problem = parallel_problem(executor, resolve_chat_model(None, env.storage.home), **sizes)
        if problem is not None:
            raise ConfigError(f"{choice.spelled(problem[0])}: {problem[1]}")
    product = brief_product(
        env.config,
        env.storage,
        target.collection,
        env.tracking,
        env.store,
        env.documents_for,
        env.generator,
        device=env.device,
        dtype=env.dtype,
        execution=replace(choice, name=executor),
        engine_options=options,
    )
    product.executor  # noqa: B018 - chosen now: what it cannot run is refused before a stage
    return DocumentBriefs(product)


# the briefs' questions, embedded beside each generation of the collection's vector index
# (`briefs.index_questions`) and searched with its chunks
QUESTION_ROWS = Feed(
    into=INDEX,
    suffix=QUESTIONS_SUFFIX,
    writes=lambda config, name: (
        (briefs := config.collection(name).briefs) is not None and briefs.index_questions
    ),
)

BRIEFS = ProductKind(
    name=NAME,
    package="batch_pipeline.briefs",
    family="generate",
    section=BriefsConfig,
    targets=targets,
    open=open_briefs,
    partition=BriefPartition,
    rule=CoversCollectionRule,
    scorer=BriefScorer,
    report="batch_pipeline.briefs.report",
    definitions="batch_pipeline.definitions.document_briefs:brief_definitions",
    configured_at="collections[].briefs",
    collection_runs=True,
    feeds=(QUESTION_ROWS,),
    inputs=(INDEX,),
    commands="batch_pipeline.cli.briefs",
)
