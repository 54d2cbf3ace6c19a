"""`batch_pipeline.BatchPipelineComponent` in a Dagster project, through Dagster's own
component test helpers: scaffolded, loaded and built; each attribute it has and each one
`post_processing` sets reaches our assets; bad input is refused naming the field."""

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox

from batch_pipeline import BatchPipelineComponent
from batch_pipeline.config import ConfigError, load_config
from tests.support import write_config, write_corpus

TYPE = "batch_pipeline.BatchPipelineComponent"


def scaffolded(sandbox, pages: Path, **params) -> Path:
    return sandbox.scaffold_component(
        component_cls=BatchPipelineComponent,
        defs_path="docs",
        scaffold_params={"pages": str(pages), **params},
    )


def with_attributes(defs_path: Path, **attributes) -> None:
    """The scaffolded defs.yaml with `attributes` set (and `post_processing`, if given)."""
    post_processing = attributes.pop("post_processing", None)
    body = {"type": TYPE, "attributes": {"config_path": "pipeline.yaml", **attributes}}
    if post_processing is not None:
        body["post_processing"] = post_processing
    (defs_path / "defs.yaml").write_text(yaml.safe_dump(body), encoding="utf-8")


def test_the_package_exposes_the_component_type_for_dg():
    """What `dg list components` reads from the entry point: the type, with a description,
    listed by `dir()` although the package imports no Dagster until it is asked for."""
    import batch_pipeline

    assert "BatchPipelineComponent" in dir(batch_pipeline)
    assert batch_pipeline.BatchPipelineComponent is BatchPipelineComponent
    assert BatchPipelineComponent.get_spec().description or BatchPipelineComponent.__doc__
    with pytest.raises(AttributeError, match="no attribute 'NoSuchComponent'"):
        batch_pipeline.NoSuchComponent  # noqa: B018


def test_scaffolding_writes_a_defs_yaml_and_a_pipeline_file_that_build(tmp_path):
    pages = write_corpus(tmp_path / "pages")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages, glob="**/*.md")
        text = (defs_path / "defs.yaml").read_text()
        body = yaml.safe_load(text)
        assert body["attributes"] == {"config_path": "pipeline.yaml"}
        # what a second instance in the project uncomments, named for the folder
        assert "  # translation: {key_prefix: docs}" in text
        assert "  # home: .batch_pipeline/docs" in text
        # the pipeline file the CLI reads: one collection over the pages, named after the folder
        config = load_config(defs_path / "pipeline.yaml")
        (collection,) = config.collections
        assert collection.name == "docs" and collection.source.path == pages.resolve()
        assert collection.source.glob == "**/*.md"
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (component, defs):
            assert isinstance(component, BatchPipelineComponent)
            spec = defs.get_assets_def("vector_index").specs_by_key[dg.AssetKey("vector_index")]
            assert spec.partitions_def.get_partition_keys() == ["docs"]
            assert defs.resolve_job_def("embedding_job") is not None
            assert defs.get_sensor_def("docs_publish_sensor") is not None
            resource = defs.resources["pipeline"]
            assert Path(resource.config_path) == (defs_path / "pipeline.yaml").resolve()


def test_scaffolding_with_no_pages_makes_an_empty_folder_that_loads():
    with create_defs_folder_sandbox() as sandbox:
        defs_path = sandbox.scaffold_component(
            component_cls=BatchPipelineComponent, defs_path="Support Pages"
        )
        assert (defs_path / "pages").is_dir()
        (collection,) = load_config(defs_path / "pipeline.yaml").collections
        assert collection.name == "support_pages"


def test_scaffolding_refuses_a_missing_folder_naming_the_field(tmp_path):
    with create_defs_folder_sandbox() as sandbox, pytest.raises(ConfigError) as refused:
        scaffolded(sandbox, tmp_path / "nowhere")
    assert "collections[0].source.path" in str(refused.value)
    assert "nowhere" in str(refused.value)


@pytest.mark.parametrize(
    ("attribute", "value", "field"),
    [
        ("home", "state", "home"),
        ("lancedb_uri", "s3://bucket/lancedb", "lancedb_uri"),
        ("tracking_url", "postgresql://127.0.0.1/test", "tracking_url"),
        ("staging_dir", "s3://bucket/staging", "staging_dir"),
    ],
)
def test_each_attribute_reaches_the_pipeline_resource(tmp_path, attribute, value, field):
    pages = write_corpus(tmp_path / "pages")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages)
        with_attributes(defs_path, **{attribute: value})
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_, defs):
            assert getattr(defs.resources["pipeline"], field) == value


def test_attributes_are_templated_from_the_environment(tmp_path, monkeypatch):
    """What differs per deployment comes from `{{ env.X }}`, as in any component's YAML."""
    pages = write_corpus(tmp_path / "pages")
    monkeypatch.setenv("DOCS_TRACKING_URL", "postgresql://127.0.0.1:5432/test")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages)
        with_attributes(defs_path, tracking_url="{{ env.DOCS_TRACKING_URL }}")
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_, defs):
            assert defs.resources["pipeline"].tracking_url == "postgresql://127.0.0.1:5432/test"


def messages(error: BaseException) -> str:
    """An error and its causes, as `dg check defs` prints them under the component's tree."""
    found = [str(error)]
    while (error := error.__cause__ or error.__context__) is not None:
        found.append(str(error))
    return "\n".join(found)


def _spec(defs: dg.Definitions, name: str) -> dg.AssetSpec:
    return defs.get_assets_def(name).specs_by_key[dg.AssetKey(name)]


POST_PROCESSED = [
    ("owners", ["team:docs"], lambda spec: spec.owners == ["team:docs"]),
    ("tags", {"tier": "nightly"}, lambda spec: spec.tags.get("tier") == "nightly"),
    ("kinds", ["docs"], lambda spec: "docs" in spec.kinds),
    ("group_name", "docs_search", lambda spec: spec.group_name == "docs_search"),
    ("description", "The docs' index.", lambda spec: spec.description == "The docs' index."),
    (
        "metadata",
        {"team_channel": "#docs"},
        lambda spec: spec.metadata.get("team_channel") == "#docs",
    ),
    ("code_version", "v7", lambda spec: spec.code_version == "v7"),
    (
        "automation_condition",
        "{{ dg.AutomationCondition.on_cron('0 3 * * *') }}",
        lambda spec: (
            spec.automation_condition is not None and "0 3 * * *" in str(spec.automation_condition)
        ),
    ),
    (
        "freshness_policy",
        "{{ dg.FreshnessPolicy.time_window(fail_window=datetime.timedelta(hours=26)) }}",
        lambda spec: (
            getattr(spec.freshness_policy, "fail_window", None) is not None
            and (spec.freshness_policy.fail_window.days, spec.freshness_policy.fail_window.seconds)
            == (1, 2 * 3600)
        ),
    ),
]


@pytest.mark.parametrize(
    ("attribute", "value", "holds"), POST_PROCESSED, ids=[p[0] for p in POST_PROCESSED]
)
def test_each_post_processing_attribute_reaches_our_assets(tmp_path, attribute, value, holds):
    """`post_processing` in the defs.yaml sets an attribute on the assets it targets (here
    every asset of the collection's index group), as it does for dbt's and Sling's."""
    pages = write_corpus(tmp_path / "pages")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages)
        target = {"target": "group:embedding_pipeline", "attributes": {attribute: value}}
        with_attributes(defs_path, post_processing={"assets": [target]})
        with sandbox.load_component_and_build_defs(defs_path=defs_path) as (_, defs):
            for name in ("source_documents", "chunk_embeddings", "vector_index"):
                assert holds(_spec(defs, name)), (name, attribute)
            if attribute != "group_name":  # the index's generation review is not targeted
                assert not holds(_spec(defs, "index_generation"))


def test_a_bad_pipeline_field_fails_the_build_with_the_cli_s_message(tmp_path):
    pages = write_corpus(tmp_path / "pages")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages)
        config = defs_path / "pipeline.yaml"
        write_config(config, source=str(pages), extra="sensor: {interval_seconds: 0}")
        with pytest.raises(ConfigError) as cli:
            load_config(config)
        with (
            pytest.raises(Exception) as built,
            sandbox.load_component_and_build_defs(defs_path=defs_path),
        ):
            pass
        assert "sensor.interval_seconds" in str(cli.value)
        assert str(cli.value) in messages(built.value)  # the CLI's own message


def test_a_bad_component_attribute_is_refused_by_name(tmp_path):
    pages = write_corpus(tmp_path / "pages")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages)
        with_attributes(defs_path, config_pth="pipeline.yaml")
        with (
            pytest.raises(Exception) as refused,
            sandbox.load_component_and_build_defs(defs_path=defs_path),
        ):
            pass
        assert "config_pth" in messages(refused.value)


def test_the_sample_code_location_loads_through_the_component(monkeypatch):
    """This repository's code location is the component over pipeline.yaml; its owners come
    from the sample's defs.yaml, not from code."""
    monkeypatch.delenv("BATCH_PIPELINE_CONFIG", raising=False)
    from batch_pipeline.definitions import defs

    loaded = defs()
    owners = {spec.group_name: spec.owners for spec in loaded.resolve_all_asset_specs()}
    assert owners["embedding_pipeline"] == ["team:search-platform"]
    assert owners["index_generations"] == ["team:search-platform"]
    assert owners["document_briefs"] == owners["related_documents"] == ["team:support-content"]
    assert owners["ticket_intents"] == ["team:support-analytics"]
    pipeline = loaded.resources["pipeline"]
    assert Path(pipeline.config_path).name == "pipeline.yaml"
    assert {s.name for s in loaded.sensors} >= {"handbook_publish_sensor", "ticket_exports_sensor"}


def two_instances(sandbox, tmp_path: Path) -> dict[str, Path]:
    """Two instances of the component, `docs` (with no translation: its names as they are)
    and `wiki` (key prefix `wiki`), each over its own folder of pages and its own home, and
    each with a collection called `handbook`."""
    homes = {}
    for prefix, pages in (
        ("docs", write_corpus(tmp_path / "docs_pages")),
        ("wiki", tmp_path / "wiki_pages"),
    ):
        if prefix == "wiki":
            pages.mkdir()
            (pages / "returns.md").write_text("# Returns\n\nParcels go back within thirty days.\n")
        defs_path = sandbox.scaffold_component(
            component_cls=BatchPipelineComponent,
            defs_path=prefix,
            scaffold_params={"pages": str(pages)},
        )
        config = yaml.safe_load((defs_path / "pipeline.yaml").read_text())
        config["collections"][0]["name"] = "handbook"
        (defs_path / "pipeline.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
        homes[prefix] = tmp_path / f"{prefix}_home"
        named = {"translation": {"key_prefix": prefix}} if prefix == "wiki" else {}
        with_attributes(defs_path, home=str(homes[prefix]), **named)
    return homes


def test_two_instances_with_a_collection_of_the_same_name_never_collide(tmp_path):
    """`translation.key_prefix` names each instance's assets, ops, jobs, sensors, schedules
    and pipeline resource, so both load in one project and each run lands in its own home."""
    from batch_pipeline.index.search import open_collection, search

    with create_defs_folder_sandbox() as sandbox:
        homes = two_instances(sandbox, tmp_path)
        with sandbox.build_all_defs() as defs:
            keys = {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
            assert {"vector_index", "wiki/vector_index", "wiki/source_documents"} <= keys
            assert {s.name for s in defs.sensors} >= {
                "handbook_publish_sensor",
                "wiki__handbook_publish_sensor",
            }
            assert {s.name for s in defs.schedules} == {
                "nightly_reconciliation",
                "wiki__nightly_reconciliation",
            }
            assert {"pipeline", "wiki__pipeline"} <= set(defs.resources)
            with dg.instance_for_test() as instance:
                for job_name, prefix in (("embedding_job", ()), ("wiki__embedding_job", ("wiki",))):
                    job = defs.resolve_job_def(job_name)
                    # its own instance's assets only, though both have the same groups
                    selected = job.asset_layer.selected_asset_keys
                    assert all(tuple(k.path[:-1]) == prefix for k in selected), job_name
                    assert dg.AssetKey([*prefix, "vector_index"]) in selected
                    ran = job.execute_in_process(partition_key="handbook", instance=instance)
                    assert ran.success, job_name
                landed = instance.get_latest_materialization_event(
                    dg.AssetKey(["wiki", "vector_index"])
                )
                assert landed is not None and landed.dagster_event.partition == "handbook"
        found = {}
        for prefix, home in homes.items():
            config = sandbox.defs_folder_path / prefix / "pipeline.yaml"  # the CLI reads it too
            hits = search(
                open_collection("handbook", config, home), "parcels thirty days", mode="text"
            )
            found[prefix] = {hit.doc_id for hit in hits}
        assert found["wiki"] == {"returns.md"}
        assert "returns.md" not in found["docs"]


def test_a_key_prefix_that_is_not_a_dagster_name_is_refused_by_field(tmp_path):
    pages = write_corpus(tmp_path / "pages")
    with create_defs_folder_sandbox() as sandbox:
        defs_path = scaffolded(sandbox, pages)
        with_attributes(defs_path, translation={"key_prefix": ["team", "docs-site"]})
        with (
            pytest.raises(Exception) as refused,
            sandbox.load_component_and_build_defs(defs_path=defs_path),
        ):
            pass
        said = messages(refused.value)
        assert "key_prefix" in said and "'docs-site' is not a Dagster name" in said
