"""The component types batch-pipeline registers with `dg` (the
`dagster_dg_cli.registry_modules` entry point names the `batch_pipeline` package, which
exposes these lazily): `dg list components` lists them, `dg scaffold defs
batch_pipeline.BatchPipelineComponent NAME` writes one."""

from batch_pipeline.components.pipeline_file import BatchPipelineComponent

__all__ = ["BatchPipelineComponent"]
