"""The Dagster definitions of a batch-pipeline file (`build_definitions`): one
`*_definitions(config, namespace)` per product kind, named by its declaration (the built-in
ones' are this package's modules, one per product), merged here with the collections' job, its
triggers and the shared resources. This module names no product. `BatchPipelineComponent`
(`batch_pipeline.components`) builds through it in any Dagster project.

This repository's code location (`defs`) is the sample's component instance,
`sample/defs.yaml`, over the CLI's file: `$BATCH_PIPELINE_CONFIG`, default `pipeline.yaml`.
Steps run in-process: the stages of one partition are sequential, and a run then loads the
model and imports torch once instead of once per step. Partitions run as separate runs.
"""

import functools
import importlib
import os
import warnings
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from assets.namespace import SAMPLE, Namespace
from assets.partitions import collection_partitions
from assets.product_stages import declared_assets
from batch_pipeline.config import PipelineConfig, load_config
from batch_pipeline.declaration import ProductKind
from batch_pipeline.executors.registry import EMBED
from batch_pipeline.products import kinds_for
from batch_pipeline.sources import S3_ENV
from resources import GenerationResource, InferenceResource, PipelineResource, ScoringResource
from resources.batch_api import ENV_PREFIX, from_environment
from sensors import build_triggers


def shared_resources() -> dict[str, object]:
    """The resources every namespace shares, from the environment: the executor and Batch API
    fields (BATCH_PIPELINE_<RESOURCE>_<FIELD>) and S3's. The same objects for the same
    environment, since Dagster merges two component instances' definitions only where each
    key's resource is one object."""
    watched = tuple(
        sorted(
            (name, value)
            for name, value in os.environ.items()
            if name.startswith(ENV_PREFIX) or name in S3_ENV.values()
        )
    )
    return _shared_resources(watched)


@functools.cache
def _shared_resources(environment: tuple[tuple[str, str], ...]) -> dict[str, object]:
    return {
        "inference": from_environment(InferenceResource, "INFERENCE"),
        "generation": from_environment(GenerationResource, "GENERATION"),
        "scoring": from_environment(ScoringResource, "SCORING"),
        "s3": s3_resource(),
    }


def s3_resource() -> S3Resource:
    """dagster-aws's S3Resource over the same environment the CLI reads (`S3_ENV`), as
    `dg.EnvVar`s; credentials come from the usual AWS variables or profiles."""
    return S3Resource(**{k: dg.EnvVar(v) for k, v in S3_ENV.items() if os.environ.get(v)})


def collection_runs(
    config: PipelineConfig, faces: dict[ProductKind, dg.Definitions], namespace: Namespace
) -> dg.Definitions:
    """The collections' job over the assets of every kind that declares it rides it
    (`ProductKind.collection_runs`), one publish sensor per collection and the nightly
    reconciliation, all launching that job, and the sensor that launches it to collect the
    provider batches of those kinds' products that embed; nothing without a collection."""
    riding = [
        asset
        for kind, face in faces.items()
        if kind.collection_runs
        for asset in face.assets or ()
        if isinstance(asset, dg.AssetsDefinition)
    ]
    if not config.collections or not riding:
        return dg.Definitions()
    embedding = {
        target.name
        for kind in faces
        if kind.collection_runs and kind.family == EMBED
        for target in kind.targets(config)
    }
    job, sensors, schedules = build_triggers(config, riding, embedding, namespace)
    return dg.Definitions(jobs=[job], sensors=sensors, schedules=schedules)


def product_definitions(
    kind: ProductKind, config: PipelineConfig, namespace: Namespace = SAMPLE
) -> dg.Definitions:
    """A kind's Dagster definitions for this configuration, as its declaration names them,
    in `namespace`, or built from its declared stages on the collections' partitions where
    it names none; none for a kind with no product configured."""
    if not kind.targets(config):
        return dg.Definitions()
    if kind.definitions is None:
        partitions = collection_partitions(config)
        return dg.Definitions(assets=declared_assets(kind, partitions, namespace))
    module, _, function = kind.definitions.partition(":")
    return getattr(importlib.import_module(module), function)(config, namespace)


def build_definitions(
    config_path: str | Path | None = None,
    pipeline: PipelineResource | None = None,
    namespace: Namespace = SAMPLE,
) -> dg.Definitions:
    """Every product kind's definitions (`products.kinds_for`: the built-in kinds and those
    the configuration declares), merged, with the shared resources and the in-process
    executor. A `pipeline` resource given (the component's: where its state lives) names
    the configuration file itself, and `config_path` is then not read. Asset keys, jobs,
    sensors, schedules and the pipeline resource's key are named in `namespace` (the
    component's `translation.key_prefix`); the other resources are shared, the same in
    every namespace."""
    if pipeline is None:
        where = str(config_path) if config_path is not None else None
        pipeline = PipelineResource(config_path=where)
    config = load_config(pipeline.config_path)
    shared = dg.Definitions(
        resources={namespace.pipeline_key: pipeline, **shared_resources()},
        executor=dg.in_process_executor,
    )
    faces = {kind: product_definitions(kind, config, namespace) for kind in kinds_for(config)}
    runs = collection_runs(config, faces, namespace)
    return dg.Definitions.merge(*faces.values(), runs, shared)


SAMPLE = "batch_pipeline.definitions.sample"  # the sample's component instance (defs.yaml)


@dg.definitions
def defs() -> dg.Definitions:
    """This repository's code location: the sample's `defs.yaml`, a `BatchPipelineComponent`
    over the CLI's configuration file, loaded as any Dagster project loads it."""
    module = importlib.import_module(SAMPLE)
    tree = dg.ComponentTree.from_module(
        defs_module=module, project_root=Path(module.__file__).resolve().parents[3]
    )
    with warnings.catch_warnings():
        # post_processing's own target selection warns that a parameter Dagster passes is beta
        warnings.simplefilter("ignore", dg.BetaWarning)
        return tree.build_defs()
