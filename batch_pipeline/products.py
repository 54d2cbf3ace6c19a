"""The registry of product kinds, and the configured products behind one face.

A *product* owns generations (see `batch_pipeline.names`). Each kind of product is declared
once, in its own folder's `kind.py` (`batch_pipeline.declaration.ProductKind`); `KINDS` lists
the built-in ones, and a configuration's `products:` declares more (`config.declared`), from
any importable folder. The commands that cover every product (`status`, `doctor`, `report`,
`failures`, `generations`), the code location (`definitions.py`), `run --kind` and the layout
test loop over `kinds_for(config)` and `configured_products`, and never ask which kind they
hold.
"""

from batch_pipeline.briefs.kind import BRIEFS
from batch_pipeline.config import ConfigError, PipelineConfig
from batch_pipeline.declaration import Product, ProductEnv, ProductKind, ProductTarget
from batch_pipeline.index.kind import INDEX
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.generator import Generator
from batch_pipeline.state.storage import StorageLocations
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.kind import TICKETS

# in the order the commands list them: the collections' indexes, their briefs, the tickets
KINDS: tuple[ProductKind, ...] = (INDEX, BRIEFS, TICKETS)


def kinds_for(config: PipelineConfig | None = None) -> tuple[ProductKind, ...]:
    """The built-in kinds, then those `config` declares (`products:`); a ConfigError when a
    declared kind takes a built-in one's name."""
    if config is None:
        return KINDS
    built_in = {kind.name for kind in KINDS}
    for kind in config.declared_kinds():
        if kind.name in built_in:
            raise ConfigError(f"products.{kind.name}: {kind.name!r} is a built-in kind's name")
    return (*KINDS, *config.declared_kinds())


def kind_named(name: str, config: PipelineConfig | None = None) -> ProductKind:
    """The kind called `name` (index, briefs, tickets, or one `config` declares), or a
    ConfigError naming them."""
    kinds = kinds_for(config)
    for kind in kinds:
        if kind.name == name:
            return kind
    raise ConfigError(f"unknown kind {name!r}; kinds: {', '.join(k.name for k in kinds)}")


def product_targets(config: PipelineConfig) -> list[ProductTarget]:
    """Every configured product, kind by kind in `kinds_for`'s order; a ConfigError when two
    products would share a name (it keys their generations)."""
    targets = [target for kind in kinds_for(config) for target in kind.targets(config)]
    seen: dict[str, str] = {}
    for target in targets:
        if target.name in seen:
            raise ConfigError(
                f"products: {target.name!r} would name a product of kind {target.kind} and "
                f"one of kind {seen[target.name]}; each product needs its own"
            )
        seen[target.name] = target.kind
    return targets


def product_env(
    config: PipelineConfig,
    storage: StorageLocations,
    tracking: TrackingStore,
    store: VectorStore,
    generator: Generator | None = None,
    device: str = "auto",
    dtype: str = "auto",
) -> ProductEnv:
    """What opening a product takes; a collection partition's documents are read by its
    vector index's collect."""
    return ProductEnv(
        config,
        storage,
        tracking,
        store,
        lambda key: IndexPartition(config, storage, key, tracking, store),
        generator,
        device,
        dtype,
    )


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


def product_for_partition(kind: ProductKind, env: ProductEnv, key: str) -> Product:
    """The product of `kind` that the Dagster partition `key` belongs to: the one over the
    key's collection, or the kind's one product when it runs over no collection (by day)."""
    targets = kind.targets(env.config)
    by_collection = [t for t in targets if t.collection is not None]
    if by_collection:
        collection, _shard = env.config.locate(key)
        matching = [t for t in by_collection if t.collection == collection.name]
        if not matching:
            raise ConfigError(f"collection {collection.name!r} has no product of kind {kind.name}")
        return kind.open(env, matching[0])
    if not targets:
        raise ConfigError(f"no product of kind {kind.name} is configured")
    return kind.open(env, targets[0])
