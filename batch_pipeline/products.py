"""The registry of product kinds, and the configured products behind one face.

A *product* owns generations (see `batch_pipeline.names`). Each kind of product is declared
once, in its own folder's `kind.py` (`batch_pipeline.declaration.ProductKind`); `KINDS` lists
the built-in ones, and a configuration's `products:` declares more (`config.declared`), from
any importable folder. The commands that cover every product (`status`, `doctor`, `report`,
`failures`, `generations`), the code location (`definitions`), `run --kind` and the layout
test loop over `kinds_for(config)` and `configured_products`, and never ask which kind they
hold.
"""

from dataclasses import replace
from datetime import date

from batch_pipeline.briefs.kind import BRIEFS
from batch_pipeline.config import ConfigError, PipelineConfig
from batch_pipeline.declaration import Product, ProductEnv, ProductKind, ProductTarget
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.index.kind import INDEX, index_partition
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.generator import Generator
from batch_pipeline.related.kind import RELATED
from batch_pipeline.sources import S3ClientFactory
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.kind import TICKETS

# in the order the commands list them: the collections' indexes, their briefs and related
# documents, the tickets
KINDS: tuple[ProductKind, ...] = (INDEX, BRIEFS, RELATED, TICKETS)


def kinds_for(config: PipelineConfig | None = None) -> tuple[ProductKind, ...]:
    """The built-in kinds, then those `config` declares (`products:`; the configuration
    refused one that takes a built-in kind's name when it loaded)."""
    return KINDS if config is None else config.kinds()


def kind_named(name: str, config: PipelineConfig | None = None) -> ProductKind:
    """The kind called `name` (index, briefs, related, tickets, or one `config` declares), or a
    ConfigError naming them."""
    kinds = kinds_for(config)
    for kind in kinds:
        if kind.name == name:
            return kind
    raise ConfigError(f"unknown kind {name!r}; kinds: {', '.join(k.name for k in kinds)}")


def product_targets(config: PipelineConfig) -> list[ProductTarget]:
    """Every configured product, kind by kind in `kinds_for`'s order; each has a name of its
    own (`config.declared.one_name_per_product`, checked when the configuration loads)."""
    return [target for kind in kinds_for(config) for target in kind.targets(config)]


def product_env(
    config: PipelineConfig,
    storage: StorageLocations,
    tracking: TrackingStore,
    store: VectorStore,
    generator: Generator | None = None,
    device: str | None = None,
    dtype: str | None = None,
    execution: ExecutorChoice | None = None,
    s3_client: S3ClientFactory | None = None,
) -> ProductEnv:
    """What opening a product takes; a collection partition's documents are read by its
    vector index's collect, and S3 sources through `s3_client` (None: boto3's defaults).
    The inference settings are `device` and `dtype` where given (the CLI's flags), else the
    `execution`'s own (a Dagster resource's), else `auto`."""
    chosen = execution or ExecutorChoice()
    chosen = replace(chosen, device=device or chosen.device, dtype=dtype or chosen.dtype)

    def documents_for(key: str) -> IndexPartition:
        # read through the index's collect, which embeds nothing for the product: the run's
        # executor (another family's, as a briefs run's anthropic-batch) is not the index's
        reader = replace(chosen, name=None, batch_api=None, engine_options={})
        return index_partition(replace(env, execution=reader), key)

    env = ProductEnv(
        config,
        storage,
        tracking,
        store,
        documents_for,
        generator,
        chosen.device,
        chosen.dtype,
        chosen,
        s3_client,
    )
    return env


def configured_products(
    config: PipelineConfig,
    storage: StorageLocations,
    tracking: TrackingStore,
    store: VectorStore,
    only: str | None = None,
    generator: Generator | None = None,
) -> list[Product]:
    """Every configured product (`product_targets`' order), or only the one named `only`:
    a ConfigError that names the known ones otherwise."""
    targets = product_targets(config)
    names = [target.name for target in targets]
    if only is not None and only not in names:
        raise ConfigError(f"unknown product {only!r}; configured: {', '.join(names)}")
    env = product_env(config, storage, tracking, store, generator)
    return [
        kind_named(target.kind, config).open(env, target)
        for target in targets
        if only is None or target.name == only
    ]


def target_for_partition(kind: ProductKind, config: PipelineConfig, key: str) -> ProductTarget:
    """The configured product of `kind` that the Dagster partition `key` belongs to: the one
    over the key's collection, or the kind's one product when it runs over no collection (a
    day at a time, and `key` must be a day); a ConfigError in one line otherwise."""
    targets = kind.targets(config)
    if not targets:
        raise ConfigError(f"no product of kind {kind.name} is configured")
    by_collection = [t for t in targets if t.collection is not None]
    if by_collection:
        try:
            collection, _shard = config.locate(key)
        except KeyError as error:
            raise ConfigError(f"--kind {kind.name}: {error.args[0]}") from None
        matching = [t for t in by_collection if t.collection == collection.name]
        if not matching:
            raise ConfigError(f"collection {collection.name!r} has no product of kind {kind.name}")
        return matching[0]
    try:
        date.fromisoformat(key)
    except ValueError:
        raise ConfigError(
            f"--kind {kind.name} runs a day at a time: {key!r} is not a day (give --day YYYY-MM-DD)"
        ) from None
    return targets[0]


def product_for_partition(kind: ProductKind, env: ProductEnv, key: str) -> Product:
    """The product of `kind` that the Dagster partition `key` belongs to
    (`target_for_partition`), opened."""
    return kind.open(env, target_for_partition(kind, env.config, key))


def kind_for_partition(config: PipelineConfig, key: str) -> ProductKind:
    """The first kind, in the registry's order, with a product over the partition `key`: a
    collection's key runs its vector index, a day the ticket intents; a ConfigError naming
    the kinds tried when none has one."""
    kinds = kinds_for(config)
    for kind in kinds:
        try:
            target_for_partition(kind, config, key)
        except ConfigError:
            continue
        return kind
    raise ConfigError(
        f"no product runs the partition {key!r}: not a configured collection or shard, nor a "
        f"day of a product that runs by day (kinds: {', '.join(k.name for k in kinds)})"
    )
