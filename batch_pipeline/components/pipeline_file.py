"""`BatchPipelineComponent`: a batch-pipeline file's products as a component of any Dagster
project, the way `DbtProjectComponent` points at a dbt project.

The file is the one the CLI reads (`batch-pipeline --config FILE`, or
`$BATCH_PIPELINE_CONFIG`): one configuration, two readers, and no second schema. The
component says only where the file is and where its state lives; a bad field of the file
fails `dg check defs` with the message `batch-pipeline` itself gives.
"""

from pathlib import Path

import dagster as dg
from pydantic import Field, field_validator

from assets.namespace import SAMPLE, Namespace
from batch_pipeline.components.scaffolder import PipelineFileScaffolder
from batch_pipeline.config import config_path_from_env
from batch_pipeline.definitions import build_definitions
from resources.pipeline import PipelineResource

STATE = {name: field.description for name, field in PipelineResource.model_fields.items()}


class Translation(dg.Model, dg.Resolvable):
    """How this instance's definitions are named, so that two instances in one project (two
    files, even with a collection of the same name in each) never collide."""

    key_prefix: str | list[str] = Field(
        description=(
            "Prefixes every asset key of this instance (`handbook` makes "
            "`handbook/vector_index`); its jobs, sensors, schedules, ops and pipeline "
            "resource are named `handbook__<name>`. Letters, digits and underscores."
        ),
    )

    @field_validator("key_prefix")
    @classmethod
    def _dagster_names(cls, value: str | list[str]) -> str | list[str]:
        namespace_of(value)  # refuses a part that is not a Dagster name
        return value

    @property
    def namespace(self) -> Namespace:
        return namespace_of(self.key_prefix)


def namespace_of(key_prefix: str | list[str]) -> Namespace:
    """The namespace a key prefix names: one part, or a list of them."""
    return Namespace((key_prefix,) if isinstance(key_prefix, str) else tuple(key_prefix))


@dg.scaffold_with(PipelineFileScaffolder)
class BatchPipelineComponent(dg.Component, dg.Resolvable, dg.Model):
    """Batch inference kept fresh: the collections, vector indexes, document briefs,
    related documents and ticket intents of a batch-pipeline file, as partitioned assets
    with their checks, jobs, publish sensors and schedules."""

    config_path: str | None = Field(
        default=None,
        description=(
            "The batch-pipeline file (the one `batch-pipeline --config` reads), relative to "
            "this defs.yaml's folder; default: the CLI's, $BATCH_PIPELINE_CONFIG."
        ),
    )
    # where the state lives: the pipeline resource's own fields, described there
    home: str | None = Field(default=None, description=STATE["home"])
    lancedb_uri: str | None = Field(default=None, description=STATE["lancedb_uri"])
    tracking_url: str | None = Field(default=None, description=STATE["tracking_url"])
    staging_dir: str | None = Field(default=None, description=STATE["staging_dir"])
    translation: Translation | None = Field(
        default=None,
        description=(
            "The key prefix of this instance's assets, and of the names of its jobs, sensors, "
            "schedules and pipeline resource; default: none, every name as it is."
        ),
    )

    def config_file(self, context: dg.ComponentLoadContext) -> Path:
        """The batch-pipeline file: `config_path` resolved against this component's folder,
        or the one the CLI reads when it is unset."""
        if self.config_path is None:
            return config_path_from_env()
        path = Path(self.config_path).expanduser()
        return path if path.is_absolute() else (context.path / path).resolve()

    def get_pipeline_resource(self, context: dg.ComponentLoadContext) -> PipelineResource:
        """The `pipeline` resource every asset, check and sensor of this component opens."""
        return PipelineResource(
            config_path=str(self.config_file(context)),
            home=self.home,
            lancedb_uri=self.lancedb_uri,
            tracking_url=self.tracking_url,
            staging_dir=self.staging_dir,
        )

    def get_namespace(self) -> Namespace:
        """The namespace its definitions are named in: the translation's key prefix."""
        return self.translation.namespace if self.translation is not None else SAMPLE

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The file's products, as `batch_pipeline.definitions.build_definitions` builds them;
        a bad file raises the CLI's own `ConfigError`, naming the file and the field."""
        return build_definitions(
            pipeline=self.get_pipeline_resource(context), namespace=self.get_namespace()
        )
