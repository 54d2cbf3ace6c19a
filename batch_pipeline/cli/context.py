"""What every command shares: the opened configuration and stores (`CommandContext`), and
JSON output."""

import argparse
import json
from datetime import datetime

from batch_pipeline.briefs.kind import brief_product
from batch_pipeline.cli.briefs import batch_api_of
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.declaration import Product, ProductEnv, ProductTarget
from batch_pipeline.executors.generation import DEFAULT_EXECUTOR, parallel_problem
from batch_pipeline.index.partition import IndexPartition
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.chat_models import resolve_chat_model
from batch_pipeline.inference.runner import LoadedModels
from batch_pipeline.products import configured_products, product_env, product_targets
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from batch_pipeline.tickets.product import TicketProduct


def plain(value: object) -> object:
    """JSON for what the engine returns: times in ISO 8601, anything else as text."""
    return value.isoformat() if isinstance(value, datetime) else str(value)


def to_json(value: object) -> str:
    return json.dumps(value, indent=2, default=plain)


class CommandContext:
    """What every command opens: the configuration, the storage locations, the tracking
    store and the LanceDB store; and the engines it asks for by name."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.config = load_config(args.config)
        self.storage = resolve_storage(args.home)
        self.tracking = TrackingStore(self.storage.tracking_url)
        self.store = VectorStore(self.storage.lancedb_uri, self.storage.storage_options)

    def collections(self, only: str | None) -> list[str]:
        """The configured collections a command covers: `only` (which must be configured),
        or all of them."""
        if only is None:
            return [c.name for c in self.config.collections]
        try:
            return [self.config.collection(only).name]
        except KeyError as error:
            raise ConfigError(str(error.args[0])) from None

    def products(self, only: str | None = None) -> list[Product]:
        """The products a command covers: `only` (which must be configured), or all."""
        return configured_products(self.config, self.storage, self.tracking, self.store, only)

    def product_names(self) -> list[str]:
        """Every configured product's name, without opening any."""
        return [target.name for target in product_targets(self.config)]

    def product_target(self, name: str) -> ProductTarget:
        """The configured product `name`: its kind and collection (a ConfigError naming the
        configured ones otherwise)."""
        targets = {target.name: target for target in product_targets(self.config)}
        if name not in targets:
            raise ConfigError(f"unknown product {name!r}; configured: {', '.join(targets)}")
        return targets[name]

    def partition(self, partition: str) -> IndexPartition:
        """One partition's engine: a collection, or one shard of it."""
        return IndexPartition(self.config, self.storage, partition, self.tracking, self.store)

    def runners(self, args: argparse.Namespace) -> LoadedModels:
        """Models loaded once per command, with `--device`, `--dtype` and `--backend` where
        given; `auto`'s measurements (and OpenVINO exports) are cached under the home."""
        return LoadedModels(
            device=getattr(args, "device", "auto"),
            dtype=getattr(args, "dtype", "auto"),
            backend=getattr(args, "backend", "auto"),
            calibration_cache=self.storage.home / CALIBRATION_FILE,
        )

    def product_env(self, args: argparse.Namespace) -> ProductEnv:
        """What opening a product takes, with `--device` and `--dtype` where given."""
        return product_env(
            self.config,
            self.storage,
            self.tracking,
            self.store,
            device=getattr(args, "device", "auto"),
            dtype=getattr(args, "dtype", "auto"),
        )

    def tickets(self) -> TicketProduct:
        """The ticket intent product's engine (a ConfigError if it is not configured)."""
        return TicketProduct(self.config, self.storage, self.tracking, self.store)

    def briefs(self, collection: str, args: argparse.Namespace):  # noqa: ANN201
        """A collection's document briefs (a ConfigError if it has none)."""
        (name,) = self.collections(collection)
        executor = getattr(args, "executor", None) or DEFAULT_EXECUTOR
        parallel = {
            field: getattr(args, field, None) or 1
            for field in ("tensor_parallel_size", "data_parallel_size")
        }
        if max(parallel.values()) > 1:
            model = resolve_chat_model(None, self.storage.home)
            problem = parallel_problem(executor, model, **parallel)
            if problem is not None:
                raise ConfigError(f"--{problem[0].replace('_', '-')}: {problem[1]}")
        return brief_product(
            self.config,
            self.storage,
            name,
            self.tracking,
            self.store,
            self.partition,
            device=getattr(args, "device", "auto"),
            dtype=getattr(args, "dtype", "auto"),
            executor=executor,
            batch_api=batch_api_of(args),
            engine_options=parallel,
        )

    def pipeline(self, collection: str) -> IndexPartition:
        """The whole collection's engine (all its shards), for a configured collection."""
        (name,) = self.collections(collection)
        return self.partition(name)
