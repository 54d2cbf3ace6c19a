"""What a product declares to be one, and the face every product shows the commands.

Each product folder (`index/`, `tickets/`, `briefs/`) exports one `ProductKind` in its
`kind.py`: its name, its config section, which products the configuration has of it and how
to open one, its partition class and model family, its completeness rule and scorer, its
report, its stages, its Dagster definitions where it has its own (a kind over collections
needs none: its stage assets are built from its declaration) and whether they ride the
collections' job, its own
commands, and what it reads of another kind (`inputs`) or writes beside another kind's
generations (`feeds`), which the frame resolves (`input_product`, `feed_tables`): no product
builds another's table names. `batch_pipeline.products` holds the registry of kinds; the
commands that cover every product, the code location, the resources and the layout test
loop over it and never ask which kind they hold.

The policies every product needs are not declared here: the run frame (`runs.landing`: the
mass-deletion guard, run records, checkpoints, staging) and the generation reviewer
(`generations.review`: the gate, `every_run`, the nightly forced review, retention) apply
them to every product that runs on them.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar, Protocol

from batch_pipeline.config import ConfigError, PipelineConfig
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.generations.review import EmbedderFor, GenerationReview, GenerationReviewer
from batch_pipeline.inference.generator import Generator
from batch_pipeline.measures.progress import duration
from batch_pipeline.measures.run import DOCUMENTS
from batch_pipeline.names import companion_index
from batch_pipeline.runs.landing import Landing
from batch_pipeline.runs.partition import PartitionedProduct, ProductPartition, StagedPartition
from batch_pipeline.runs.request import Engine, RunRequest, StageOutput
from batch_pipeline.sources import DocumentSource, S3ClientFactory
from batch_pipeline.stages import Stage
from batch_pipeline.state.staging import StagePath, StagingArea
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore

Lines = Callable[[list[dict[str, object]], str], list[str]]


class Product(Protocol):
    """What the commands that cover every product (`status`, `doctor`, `report`,
    `failures`, `generations`) need of one."""

    # what its reports say they are (`"kind"` in their JSON): vector_index, ticket_intents,
    # document_briefs; its kind (`ProductKind.name`: index, tickets, briefs) is another word
    report_kind: ClassVar[str]
    status_lines: ClassVar[Lines]  # a group of this kind's status reports, as text lines
    health_line: ClassVar[Callable[[dict[str, object]], str]]  # one doctor report, one line

    @property
    def name(self) -> str:
        """The product's name: a collection's, `<collection>_briefs`, or `tickets.name`."""
        ...

    @property
    def fingerprint(self) -> str:
        """The generation key of the current configuration."""
        ...

    @property
    def index(self) -> str:
        """The current configuration's generation: its table and tracking key."""
        ...

    @property
    def reviewer(self) -> GenerationReviewer:
        """The product's generation review, which owns the policies every product follows
        (`generations.review`, retention of retired generations)."""
        ...

    @property
    def store(self) -> VectorStore:
        """Where its generations' tables are (`repair` mends them alike)."""
        ...

    def run_groups(self) -> list[list[str]]:
        """The Dagster partition keys the product's runs are recorded under, grouped as
        `report` lists them: the newest runs of each group."""
        ...

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        """Review the current configuration's generation, promoting it if the gate allows."""
        ...

    def partition(self, key: str) -> StagedPartition:
        """One of its partitions (a Dagster partition key), as the run frame runs it."""
        ...

    def engine_loader(
        self, partition: StagedPartition, embedder_for: EmbedderFor
    ) -> Callable[[], Engine]:
        """What a run of `partition` loads, only if it has work: an embedding product's model
        through `embedder_for`, a chat-model product's generator."""
        ...

    def after_review(self, embedder_for: EmbedderFor, run_id: str) -> dict[str, object]:
        """What the product does after a run's review, by name (the briefs land their
        questions): `RunReport.extra`."""
        ...

    def run_json(self, report: "RunReport") -> dict[str, object]:
        """A run of it, as `run --json` prints it."""
        ...

    def run_lines(self, report: "RunReport") -> list[str]:
        """A run of it, as `run` prints it."""
        ...

    def status(self) -> dict[str, object]: ...

    def health(self) -> dict[str, object]: ...


class ProductFace:
    """What every face reads off its product alike: a product's face holds its product
    object (`product`) and adds its kind, its report and its run groups."""

    def __init__(self, product) -> None:  # noqa: ANN001 - the kind's own product object
        self.product = product

    @property
    def name(self) -> str:
        return self.product.name

    @property
    def fingerprint(self) -> str:
        return self.product.fingerprint

    @property
    def index(self) -> str:
        return self.product.index

    @property
    def reviewer(self) -> GenerationReviewer:
        return self.product.reviewer

    @property
    def store(self) -> VectorStore:
        return self.product.store

    def review(self, embedder_for: EmbedderFor, force: bool = False) -> GenerationReview:
        return self.product.review(embedder_for, force)

    def partition(self, key: str) -> StagedPartition:
        return self.product.partition(key)

    def engine_loader(
        self, partition: StagedPartition, embedder_for: EmbedderFor
    ) -> Callable[[], Engine]:
        return lambda: embedder_for(partition.model)

    def after_review(self, embedder_for: EmbedderFor, run_id: str) -> dict[str, object]:
        return {}

    def run_json(self, report: "RunReport") -> dict[str, object]:
        return report.as_dict()

    def run_lines(self, report: "RunReport") -> list[str]:
        """Its land's counts in its own nouns, the run's clock and cost, the review."""
        return [
            f"run {report.run_id} of {self.name}: {report.counts_line()}",
            *report.batches_lines(),
            report.measures_line(),
            report.review_line(),
            *report.companion_lines(),
        ]


@dataclass(frozen=True)
class RunReport:
    """One run of a product's partition as the commands report it: the stages' summaries by
    name (land's a `runs.landing.Landing`), the generation's review, what was dropped by retention,
    and what the product did after its review (`extra`)."""

    run_id: str
    product: str
    partition: StagedPartition
    summaries: dict[str, object]
    review: GenerationReview
    dropped: list[str] = field(default_factory=list)  # retired generations' tables dropped
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def landing(self) -> Landing:
        return self.summaries[self.partition.stages[-1].name]

    def stage_metadata(self) -> dict[str, dict[str, object]]:
        stages = self.partition.stages
        return {stage.name: self.summaries[stage.name].metadata() for stage in stages}

    def as_dict(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "product": self.product,
            "partition": self.partition.partition,
            **self.stage_metadata(),
            "measures": self.landing.measures.metadata(),
            "generation": self.review.metadata(),
            **({"generations_dropped": self.dropped} if self.dropped else {}),
            **self.extra,
        }

    def counts_line(self) -> str:
        """The land's counts in the product's nouns: "3 documents landed, 0 deleted"."""
        return ", ".join(
            f"{value} {name.replace('_', ' ')}"
            for name, value in self.landing.metadata().items()
            if isinstance(value, int)
            and not isinstance(value, bool)
            and not name.startswith("deletions_held")
        )

    def measures_line(self) -> str:
        """The run's wall-clock against its window, and its throughput and cost."""
        m = self.landing.measures
        line = f"  {duration(m.wall_seconds)} wall-clock, " + (
            f"{m.window_used_fraction:.1%} of its {duration(m.window_seconds)} window"
        )
        if m.inputs and m.token_cost is not None:  # a provider's: priced by its tokens
            line += (
                f"; {m.inputs_per_second:,.1f} inputs/s through {m.executor}, "
                f"{m.cost_per_1k_inputs:.6f} {m.currency} per 1k inputs at its batch prices"
            )
        elif m.inputs:
            line += (
                f"; {m.inputs_per_second:,.1f} inputs/s on {m.device} "
                f"({' '.join(filter(None, (m.backend or 'torch', m.dtype)))}), "
                f"{m.cost_per_1k_inputs:.6f} {m.currency} "
                "per 1k inputs (estimated)"
            )
        return line

    def batches_lines(self) -> list[str]:
        """A provider's batches, where execute sent any (`stages.provider_batches`): how
        many it submitted and collected, and what still waits at the provider."""
        execute = self.summaries.get(self.partition.stages[3].name)
        batches = getattr(execute, "batches", None)
        if batches is None or not batches.metadata():
            return []
        submitted = len(batches.submitted)
        line = (
            f"  {submitted} provider batch{'es' if submitted != 1 else ''} submitted, "
            f"{len(batches.collected)} collected, {batches.pending} still at the provider"
        )
        if batches.pending:
            line += (
                f"; {self.partition.unit} waiting for their answers are neither landed nor "
                "failed: the next run collects them, and submits nothing new meanwhile"
            )
        return [line, *batches.lines(self.partition.unit)]

    def review_line(self) -> str:
        review = self.review
        line = f"  generation {review.generation}: {review.decision}: {review.reason}"
        if self.dropped:
            line += f"; retention dropped {', '.join(self.dropped)}"
        return line

    def companion_lines(self) -> list[str]:
        """The reviews of generations reviewed with the product's (a collection's reranker),
        a line each."""
        return [
            f"  generation {c.generation}: {c.decision}: {c.reason}" for c in self.review.companions
        ]


def review_after_run(
    product: Product, embedder_for: EmbedderFor, nightly: bool
) -> tuple[GenerationReview, list[str]]:
    """A product's generation review after a run, and the retired generations dropped: a
    nightly run (the schedule's, a cron's `run --trigger schedule`) forces the review and
    drops what is past `generations.retention_days`, for every product alike, from Dagster
    and from the command line."""
    review = product.review(embedder_for, force=nightly)
    return review, product.reviewer.drop_retired() if nightly else []


class CollectionDocuments(Protocol):
    """What a product over a collection's documents takes of one of its partitions, and what
    a publish sensor watches: its source (and the whole collection's), its collect (the
    vector index's, handed in: no product imports another), its staging area, which
    documents are its own (a shard holds a share), the versions landed and the changes seen
    but not yet landed."""

    staging: StagingArea

    @property
    def source(self) -> DocumentSource: ...

    @property
    def collection_source(self) -> DocumentSource: ...

    def landed_versions(self) -> Iterator[tuple[str, str]]: ...

    def record_pending(self, changes: dict[str, float | None]) -> None: ...

    def collect(self, run_id: str, doc_ids: list[str] | None = None) -> StageOutput: ...

    def owns(self, doc_id: str) -> bool:
        """Whether a document belongs to this partition (always, unless it is one shard)."""
        ...


class CollectionPartition(ProductPartition):
    """A partition of a product over a collection's documents (the briefs', a declared
    product's): its documents and their staging area are the collection partition's
    (`product.documents_for`), collect is theirs, and its checkpoints are under its own
    staging key."""

    unit = DOCUMENTS

    def __init__(self, product: PartitionedProduct, partition: str) -> None:
        super().__init__(product, partition)
        self.documents: CollectionDocuments = product.documents_for(partition)
        self.staging = self.documents.staging

    def checkpoint_dir(self) -> StagePath:
        return self.staging.checkpoint_dir(self.staging_key, self.fingerprint)

    def collect_stage(self, request: RunRequest) -> StageOutput:
        return self.documents.collect(request.run_id, request.doc_ids)


@dataclass(frozen=True)
class ProductEnv:
    """What opening a product takes: the configuration and the shared stores, a chat model
    for products that generate (None: the default engine), and a collection partition's
    documents for products over them."""

    config: PipelineConfig
    storage: StorageLocations
    tracking: TrackingStore
    store: VectorStore
    documents_for: Callable[[str], CollectionDocuments]
    generator: Generator | None = None
    device: str = "auto"  # where a default engine runs
    dtype: str = "auto"
    execution: ExecutorChoice = field(default_factory=ExecutorChoice)  # which executor runs
    # a client for an S3 source (the collection's, the ticket export's), with its endpoint
    # and region; None: boto3's own defaults
    s3_client: S3ClientFactory | None = None


@dataclass(frozen=True)
class ProductTarget:
    """One configured product of a kind: its name, and the collection it runs over (None for
    a product that runs by day)."""

    name: str
    kind: str
    collection: str | None


@dataclass(frozen=True)
class Feed:
    """Rows a product of one kind writes beside each generation of another kind's product
    over the same collection, read with that generation: the briefs' questions beside the
    vector index's chunks. Their table is `names.companion_index(generation, suffix)`: the
    fed product drops it with the generation and checks its indexes, and reads it when
    `writes(config, collection)` says the writer writes it (`feed_tables`)."""

    into: str  # the kind whose generations it sits beside
    suffix: str  # its tables' names: the generation's product name plus this
    writes: Callable[[PipelineConfig, str], bool]  # whether it is written for a collection


@dataclass(frozen=True)
class ProductKind:
    """One kind of product, declared once (see the module docstring)."""

    name: str  # index, briefs, related, tickets: what `run --kind` says
    package: str  # its folder, batch_pipeline.<name>: it imports no other product
    family: str | None  # the model family its executor runs: embed, generate; None: no model
    section: type  # its configuration section's model
    targets: Callable[[PipelineConfig], list[ProductTarget]]  # the configured products
    open: Callable[[ProductEnv, ProductTarget], Product]  # one of them, behind its face
    partition: type  # its `runs.partition.StagedPartition`
    rule: type  # its `CompletenessRule`
    scorer: type | None  # its `GenerationScorer`, where it has a labelled set
    report: str  # the module of its status and doctor reports
    # `module:function` giving its Dagster definitions for a configuration and a namespace
    # (`function(config, namespace)`: the component's key prefix, which its names carry);
    # None: its five `stages` as assets on the collections' partitions, opened through
    # `open`, in the group its land asset names (`assets.product_stages.declared_assets`)
    definitions: str | None = None
    stages: tuple[Stage, ...] = ()  # its five stages, for definitions built from it
    commands: str | None = None  # the module of its own commands, where it has any
    # its assets ride the collections' job: each collection's publish sensor and the nightly
    # reconciliation launch them with the partition's collect (a kind over collections)
    collection_runs: bool = False
    # what it writes beside another kind's generations (read with them), and the kinds whose
    # live generation it reads: the frame resolves both (`feed_tables`, `input_product`)
    feeds: tuple[Feed, ...] = ()
    inputs: tuple[str, ...] = ()
    # the YAML key of its section, for a built-in kind configured elsewhere than under
    # `products: <name>:` (the vector index: collections; the ticket intents: tickets)
    configured_at: str | None = None
    # its own executor, for a kind whose plan runs no model (family None); a kind of a model
    # family runs the executor its run names from that family's (`executors.registry`)
    executor: type | None = None
    # what `generations list` says of one of its generations beyond every product's fields,
    # from the generation's recorded configuration ('' for nothing)
    generation_note: Callable[[dict[str, object]], str] = lambda model_config: ""

    def __post_init__(self) -> None:
        if self.definitions is None and len(self.stages) != 5:
            raise ValueError(
                f"kind {self.name!r} declares neither its Dagster definitions "
                "(`definitions='module:function'`) nor its five stages (`stages=`) to build "
                "them from"
            )


def feed_tables(
    config: PipelineConfig, kind: str, collection: str, index: str, written: bool = False
) -> list[str]:
    """The tables other kinds' declared feeds keep beside the generation `index` of the
    product of `kind` over `collection`: every one (what is dropped and checked with it), or,
    `written`, those the configuration now writes (what is read with it)."""
    return [
        companion_index(index, feed.suffix)
        for other in config.kinds()
        for feed in other.feeds
        if feed.into == kind and (not written or feed.writes(config, collection))
    ]


def input_product(config: PipelineConfig, reader: str, kind: str, collection: str) -> str:
    """The product of `kind` over `collection` whose live generation the kind `reader`
    declares it reads (`ProductKind.inputs`); a ConfigError when it does not declare it or
    no such product is configured."""
    kinds = {k.name: k for k in config.kinds()}
    if kind not in kinds[reader].inputs:
        raise ConfigError(f"the {reader} kind reads no {kind} generation: declare it in inputs")
    for target in kinds[kind].targets(config):
        if target.collection == collection:
            return target.name
    raise ConfigError(f"collection {collection!r} has no product of kind {kind}")
