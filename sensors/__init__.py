"""Sensors and schedules that trigger the pipeline."""

from batch_pipeline.config import PipelineConfig
from sensors.embedding_job import build_embedding_job
from sensors.nightly_schedule import build_nightly_schedule
from sensors.publish_sensor import build_publish_sensor


def build_triggers(config: PipelineConfig):  # noqa: ANN201
    """The embedding job, one publish sensor per collection, and the nightly schedule."""
    job = build_embedding_job()
    sensors = [build_publish_sensor(c.name, config, job) for c in config.collections]
    return job, sensors, [build_nightly_schedule(config, job)]
