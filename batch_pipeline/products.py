"""The products on the engine, behind one face.

A *product* owns generations (see `batch_pipeline.names`): each configured collection's
vector index, its document briefs where it has `briefs:`, and the ticket intents. `Product`
is what the commands that cover every product (`status`, `doctor`, `report`, `failures`,
`generations`) need of one; they loop over `configured_products` and never ask which kind
they hold. A new product implements this face
over its own engine, and its report module under `batch_pipeline.reports`.
"""

from collections.abc import Callable
from typing import ClassVar, Protocol

from batch_pipeline.briefs.product import BriefProduct, CollectionDocuments
from batch_pipeline.config import ConfigError, PipelineConfig
from batch_pipeline.generations.review import EmbedderFor, GenerationReview, GenerationReviewer
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.chat_models import resolve_chat_model
from batch_pipeline.inference.generator import Generator
from batch_pipeline.inference.vllm_generator import VllmGenerator, engine_settings_for
from batch_pipeline.names import briefs_product_name
from batch_pipeline.reports import briefs as brief_report
from batch_pipeline.reports import collection as collection_report
from batch_pipeline.reports import tickets as ticket_report
from batch_pipeline.stages.prompt_plan import PromptPlanSettings, plan_settings_for
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.product import TicketProduct

Lines = Callable[[list[dict[str, object]], str], list[str]]


class Product(Protocol):
    kind: ClassVar[str]  # vector_index, ticket_intents, document_briefs
    status_lines: ClassVar[Lines]  # a group of this kind's status reports, as text lines
    health_line: ClassVar[Callable[[dict[str, object]], str]]  # one doctor report, one line

    @property
    def name(self) -> str:
        """The product's name: a collection's, or `tickets.name`."""
        ...

    @property
    def fingerprint(self) -> str:
        """The generation key of the current configuration."""
        ...

    @property
    def index(self) -> str:
        """The current configuration's generation: its table and tracking key."""
        ...

    def run_groups(self) -> list[list[str]]:
        """The Dagster partition keys the product's runs are recorded under, grouped as
        `report` lists them: the newest runs of each group."""
        ...

    @property
    def reviewer(self) -> GenerationReviewer:
        """The product's generation review, which owns the policies every product follows
        (`generations.review`, retention of retired generations)."""
        ...

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        """Review the current configuration's generation, promoting it if the gate allows."""
        ...

    def status(self) -> dict[str, object]: ...

    def health(self) -> dict[str, object]: ...


class _Face:
    """What every face reads off its engine alike."""

    def __init__(self, engine: IndexPartition | TicketProduct | BriefProduct) -> None:
        self.engine = engine

    @property
    def name(self) -> str:
        return self.engine.name

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

    @property
    def index(self) -> str:
        return self.engine.index

    @property
    def reviewer(self) -> GenerationReviewer:
        return self.engine.reviewer


class VectorIndex(_Face):
    """A collection's vector index, as a product (its engine: the whole collection, every
    shard)."""

    kind: ClassVar[str] = collection_report.KIND
    status_lines: ClassVar[Lines] = staticmethod(collection_report.status_lines)
    health_line = staticmethod(collection_report.health_line)
    engine: IndexPartition

    @property
    def reviewer(self) -> GenerationReviewer:
        return self.engine.lifecycle.reviewer

    def run_groups(self) -> list[list[str]]:
        """The collection's own key and, when sharded, each shard's, one group each."""
        collection = self.engine.collection
        keys = [self.name] + (collection.partition_keys() if collection.shards > 1 else [])
        return [[key] for key in keys]

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        return self.engine.review(embedder_for, force)

    def status(self) -> dict[str, object]:
        return collection_report.collection_status(self.engine)

    def health(self) -> dict[str, object]:
        return collection_report.collection_health(self.engine)


class TicketIntents(_Face):
    """The ticket intents, as a product."""

    kind: ClassVar[str] = ticket_report.KIND
    status_lines: ClassVar[Lines] = staticmethod(ticket_report.status_lines)
    health_line = staticmethod(ticket_report.health_line)
    engine: TicketProduct

    def run_groups(self) -> list[list[str]]:
        """Every due day, in one group: a day runs once a night, as a rule."""
        return [self.engine.partition_days()]

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        return self.engine.review(embedder_for, force)

    def status(self) -> dict[str, object]:
        return ticket_report.product_status(self.engine)

    def health(self) -> dict[str, object]:
        return ticket_report.product_health(self.engine)


class DocumentBriefs(_Face):
    """A collection's document briefs, as a product."""

    kind: ClassVar[str] = brief_report.KIND
    status_lines: ClassVar[Lines] = staticmethod(brief_report.status_lines)
    health_line = staticmethod(brief_report.health_line)
    engine: BriefProduct

    def run_groups(self) -> list[list[str]]:
        """The collection's partition: the briefs run on it."""
        return [[self.engine.collection_name]]

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        return self.engine.review(embedder_for, force)

    def status(self) -> dict[str, object]:
        return brief_report.product_status(self.engine)

    def health(self) -> dict[str, object]:
        return brief_report.product_health(self.engine)


def brief_product(
    config: PipelineConfig,
    storage: StorageLocations,
    collection: str,
    tracking: TrackingStore,
    store: VectorStore,
    generator: Generator | None = None,
    plan_settings: PromptPlanSettings | None = None,
    device: str = "auto",
    dtype: str = "auto",
    documents_for: Callable[[str], CollectionDocuments] | None = None,
) -> BriefProduct:
    """A collection's briefs, its documents read through the collection's vector index
    engine. Without `generator`, vLLM on the generation resource's defaults: the shipped chat
    model, `dtype: auto` decided (and cached) here; its engine starts only if there is work."""
    if generator is None:
        model = resolve_chat_model(None, storage.home)
        engine = engine_settings_for(model, device, dtype, storage.home / CALIBRATION_FILE)
        generator = VllmGenerator(model, engine)
        plan_settings = plan_settings or plan_settings_for(engine)
    return BriefProduct(
        config,
        storage,
        collection,
        generator,
        documents_for or (lambda key: IndexPartition(config, storage, key, tracking, store)),
        plan_settings,
        tracking,
        store,
    )


INDEX_KIND, BRIEFS_KIND, TICKETS_KIND = "index", "briefs", "tickets"  # what `run --kind` says


def product_targets(config: PipelineConfig) -> list[tuple[str, str, str | None]]:
    """Every configured product as (name, kind, collection), in `configured_products`' order:
    each collection's vector index, the briefs of those that have them, then the ticket
    intents (no collection: they run by day)."""
    targets = [(c.name, INDEX_KIND, c.name) for c in config.collections]
    targets += [
        (briefs_product_name(c.name), BRIEFS_KIND, c.name) for c in config.collections if c.briefs
    ]
    if config.tickets is not None:
        targets.append((config.tickets.name, TICKETS_KIND, None))
    return targets


def configured_products(
    config: PipelineConfig,
    storage: StorageLocations,
    tracking: TrackingStore,
    store: VectorStore,
    only: str | None = None,
    generator: Generator | None = None,
) -> list[Product]:
    """Every configured product (each collection's vector index, then the document briefs of
    the collections that have them, then the ticket intents),
    or only the one named `only`: a ConfigError that names the known ones otherwise."""
    targets = product_targets(config)
    names = [name for name, _, _ in targets]
    if only is not None and only not in names:
        raise ConfigError(f"unknown product {only!r}; configured: {', '.join(names)}")
    products: list[Product] = []
    for name, kind, collection in targets:
        if only is not None and name != only:
            continue
        if kind == TICKETS_KIND:
            products.append(TicketIntents(TicketProduct(config, storage, tracking, store)))
        elif kind == BRIEFS_KIND:
            product = brief_product(config, storage, collection, tracking, store, generator)
            products.append(DocumentBriefs(product))
        else:
            pipeline = IndexPartition(config, storage, name, tracking, store)
            products.append(VectorIndex(pipeline))
    return products
