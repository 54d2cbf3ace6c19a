"""What every command shares: the opened configuration and stores (`CommandContext`), and
JSON output."""

import argparse
import json
from datetime import datetime

from batch_pipeline.cli.executors import executor_choice
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.declaration import Product, ProductEnv, ProductKind, ProductTarget
from batch_pipeline.executors import ExecutorChoice
from batch_pipeline.inference.calibration import CALIBRATION_FILE
from batch_pipeline.inference.runner import LoadedModels
from batch_pipeline.products import (
    configured_products,
    product_env,
    product_for_partition,
    product_targets,
)
from batch_pipeline.state.storage import resolve_storage
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore


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
        return [self.config.configured(only).name]

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

    def runners(self, args: argparse.Namespace) -> LoadedModels:
        """Models loaded once per command, with `--device`, `--dtype` and `--backend` where
        given; `auto`'s measurements (and OpenVINO exports) are cached under the home."""
        return LoadedModels(
            device=getattr(args, "device", "auto"),
            dtype=getattr(args, "dtype", "auto"),
            backend=getattr(args, "backend", "auto"),
            calibration_cache=self.storage.home / CALIBRATION_FILE,
        )

    def product_env(self, args: argparse.Namespace | None = None) -> ProductEnv:
        """What opening a product takes, with `--device`, `--dtype` and the executor flags
        (`cli/executors.py`) where given."""
        return product_env(
            self.config,
            self.storage,
            self.tracking,
            self.store,
            device=getattr(args, "device", "auto"),
            dtype=getattr(args, "dtype", "auto"),
            execution=executor_choice(args) if args is not None else ExecutorChoice(),
        )

    def product_of(
        self, kind: ProductKind, key: str, args: argparse.Namespace | None = None
    ) -> Product:
        """The product of `kind` over the partition `key` (a collection, a shard, a day),
        opened with `args`' settings; a ConfigError in one line when it has none."""
        return product_for_partition(kind, self.product_env(args), key)

    def kind_product(self, kind: ProductKind) -> Product:
        """The one product of a kind that runs over no collection (the ticket intents); a
        ConfigError when none is configured."""
        targets = kind.targets(self.config)
        if not targets:
            raise ConfigError(f"no product of kind {kind.name} is configured")
        return kind.open(self.product_env(), targets[0])


def product_option(parser: argparse.ArgumentParser, required: bool = False) -> None:
    """`--product` (or `--collection`): one product, or every product where not required."""
    parser.add_argument(
        "--product",
        "--collection",
        dest="product",
        required=required,
        help="one product: a collection (its vector index) or the ticket intents; "
        + ("required" if required else "default: every product"),
    )
