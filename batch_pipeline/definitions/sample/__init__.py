"""The sample's component instance (`defs.yaml`): this repository's `pipeline.yaml`, loaded
the way any Dagster project loads batch-pipeline."""
