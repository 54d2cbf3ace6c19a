"""The registry of product kinds, and the configured products behind one face.

A *product* owns generations (see `batch_pipeline.names`). Each kind of product is declared
once, in its own folder's `kind.py` (`batch_pipeline.declaration.ProductKind`); `KINDS` lists
them. The commands that cover every product (`status`, `doctor`, `report`, `failures`,
`generations`), the code location (`definitions.py`), `run --kind` and the layout test loop
over `KINDS` and `configured_products`, and never ask which kind they hold.
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


def kind_named(name: str) -> ProductKind:
    """The kind called `name` (index, briefs, tickets), or a ConfigError naming them."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise ConfigError(f"unknown kind {name!r}; kinds: {', '.join(k.name for k in KINDS)}")


def product_targets(config: PipelineConfig) -> list[ProductTarget]:
    """Every configured product, kind by kind in `KINDS`' order."""
    return [target for kind in KINDS for target in kind.targets(config)]


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
        kind_named(target.kind).open(env, target)
        for target in targets
        if only is None or target.name == only
    ]
