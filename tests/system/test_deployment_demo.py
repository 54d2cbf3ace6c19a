"""The production profile, locally: a Dagster daemon on PostgreSQL instance storage, the
queued run coordinator, the default run launcher, and a 4-shard backfill with up to 4
concurrent runs into one LanceDB table, with the tracking store on PostgreSQL too. The S3
variant keeps the LanceDB table and every stage file on moto's S3 server on loopback."""

import json
import os
import shutil
import subprocess
import textwrap
import time
import uuid

import boto3
import dagster as dg
import psycopg
import pytest

from batch_pipeline.config import load_config
from batch_pipeline.generations.registry import GenerationRegistry
from batch_pipeline.names import briefs_product_name
from batch_pipeline.state.reconcile import reconcile_index
from batch_pipeline.state.staging import StagingArea
from batch_pipeline.state.tracking import TrackingStore
from batch_pipeline.state.vector_store import VectorStore
from tests.support import BIN, REPO, dagster_daemon, index_of, many_articles, pipeline_env

PG = "postgresql://postgres@127.0.0.1:5432/test"


@pytest.fixture()
def databases():
    names = [f"bp_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("dagster", "tracking")]
    with psycopg.connect(PG, autocommit=True) as conn:
        for name in names:
            conn.execute(f"CREATE DATABASE {name}")
    yield names
    with psycopg.connect(PG, autocommit=True) as conn:
        for name in names:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _s3_storage(endpoint: str) -> tuple[dict[str, str], dict[str, str]]:
    """A fresh bucket on the moto server: (environment for the pipeline, storage options)."""
    bucket = f"bp-demo-{uuid.uuid4().hex[:8]}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket=bucket)
    options = {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
        "allow_http": "true",
    }
    env = {
        "BATCH_PIPELINE_LANCEDB_URI": f"s3://{bucket}/lancedb",
        "BATCH_PIPELINE_STAGING_DIR": f"s3://{bucket}/staging",
        "BATCH_PIPELINE_STORAGE_OPTIONS": json.dumps(options),
    }
    return env, options


def failures(instance: dg.DagsterInstance, runs: list) -> list[str]:
    """Each run's status, and what failed in the runs that did not succeed."""
    said = [str(r.status) for r in runs]
    for run in runs:
        for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
            error, messages = entry.dagster_event.step_failure_data.error, []
            while error is not None:  # Dagster's wrapper, then the error itself
                messages.append(error.message.strip())
                error = error.cause
            said.append(f"{entry.step_key}: {' <- '.join(messages)[:2000]}")
    return said


@pytest.mark.parametrize("storage", ["local", "s3"])
def test_four_shard_backfill_on_a_postgres_backed_daemon(tmp_path, databases, storage, request):
    dagster_db, tracking_db = databases
    storage_env, options = (
        _s3_storage(request.getfixturevalue("moto_server")) if storage == "s3" else ({}, {})
    )
    many_articles(tmp_path / "docs")
    # the local variant briefs every shard too, with the shipped chat model on vLLM: four
    # engines at once, one per shard run
    briefs = storage == "local"
    for name in ("brief_prompt.yaml", "brief_schema.json"):
        shutil.copy(REPO / "data" / name, tmp_path / name)
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: handbook\n    shards: 4\n"
        "    source: {kind: filesystem, path: docs}\n"
        + (
            "    briefs: {prompt: brief_prompt.yaml, output_schema: brief_schema.json,"
            " document_tokens: 64}\n"
            if briefs
            else ""
        )
        + "sensor: {enabled: false}\nschedule: {enabled: false}\n"
    )
    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    (dagster_home / "dagster.yaml").write_text(
        textwrap.dedent(f"""\
        storage:
          postgres:
            # psycopg2 named explicitly: SQLAlchemy 2.1 maps plain postgresql:// to psycopg 3
            postgres_url: postgresql+psycopg2://postgres@127.0.0.1:5432/{dagster_db}
        run_coordinator:
          module: dagster._core.run_coordinator
          class: QueuedRunCoordinator
          config:
            max_concurrent_runs: 4
            dequeue_interval_seconds: 1
            tag_concurrency_limits:
              - key: dagster/partition
                value: {{applyLimitPerUniqueValue: true}}
                limit: 1
        """)
    )
    home = tmp_path / "home"
    if briefs:  # the shipped chat model, converted once (conversion is not under test here)
        chat_model_dir = request.getfixturevalue("chat_model_dir")
        (home / "models").mkdir(parents=True)
        (home / "models" / chat_model_dir.name).symlink_to(chat_model_dir)
    tracking_url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{tracking_db}"
    env = pipeline_env(
        config,
        home,
        DAGSTER_HOME=str(dagster_home),
        BATCH_PIPELINE_TRACKING_URL=tracking_url,
        **storage_env,
    )
    # the schema first, as docs/scaling-out.md says: a daemon and a CLI creating the tables of
    # a new database at once can fail with `type "secondary_indexes" already exists`
    subprocess.run(
        [str(BIN / "dagster"), "instance", "migrate"], cwd=REPO, env=env, check=True, timeout=300
    )
    with dagster_daemon(env, tmp_path / "daemon.log") as daemon:
        partitions = ",".join(f"handbook-s{n:02d}" for n in range(4))
        submitted = subprocess.run(
            [
                str(BIN / "dagster"),
                "job",
                "backfill",
                "-m",
                "batch_pipeline.definitions",
                "-j",
                "embedding_job",
                "--partitions",
                partitions,
                "--noprompt",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert submitted.returncode == 0, submitted.stdout + submitted.stderr
        instance = dg.DagsterInstance.from_config(str(dagster_home))
        deadline = time.time() + (900 if briefs else 480)
        while time.time() < deadline:
            runs = instance.get_runs()
            if len(runs) == 4 and all(r.is_finished for r in runs):
                break
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            time.sleep(2)
        runs = instance.get_runs()
        assert len(runs) == 4 and all(r.is_success for r in runs), failures(instance, runs)
        assert sorted(r.tags["dagster/partition"] for r in runs) == partitions.split(",")
        records = {r.run_id: instance.get_run_record_by_id(r.run_id) for r in runs}
        spans = [(rec.start_time, rec.end_time) for rec in records.values()]
        overlapping = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
        assert overlapping > 1  # the shards really ran in parallel
        instance.dispose()

        index = index_of(config)
        lancedb_uri = storage_env.get("BATCH_PIPELINE_LANCEDB_URI", str(home / "lancedb"))
        store, tracking = VectorStore(lancedb_uri, options), TrackingStore(tracking_url)
        rows = store.scan(index, ["chunk_id", "doc_id", "partition"]).to_pylist()
        assert len(rows) == len({r["chunk_id"] for r in rows})  # no conflict lost or doubled
        assert {r["partition"] for r in rows} == set(partitions.split(","))  # every shard landed
        assert {r["doc_id"] for r in rows} == {f"article-{i:02d}.md" for i in range(24)}
        assert reconcile_index(store, tracking, index).ok  # tracking and table agree
        assert tracking.document_count(index) == 24
        live = GenerationRegistry(tracking).live("handbook")
        assert live.index_name == index and live.complete
        if briefs:  # every shard briefed its own documents, once, and the generation is live
            # where each is valid. The shipped 135M model may loop on these repetitive articles
            # past max_tokens: that brief is then its document's recorded failure, in its own
            # partition, and the generation, one brief short, is not promoted.
            collection = load_config(config).collections[0]
            product = briefs_product_name("handbook")
            (record,) = GenerationRegistry(tracking).list_all(product)
            assert record.full_pass and record.documents == 24
            rows = store.scan(record.index_name, ["doc_id", "partition"]).to_pylist()
            failed = tracking.failures_by_doc(record.index_name)
            briefed = [r["doc_id"] for r in rows]
            assert len(briefed) == len(set(briefed)) == record.rows  # each once
            assert not set(briefed) & set(failed)
            assert sorted([*briefed, *failed]) == [f"article-{i:02d}.md" for i in range(24)]
            assert all(r["partition"] == collection.partition_of(r["doc_id"]) for r in rows)
            assert {f["reason"] for f in failed.values()} <= {"invalid_output"}
            live_briefs = GenerationRegistry(tracking).live(product)
            assert (live_briefs is not None) == (not failed), (failed, record.decision)
            assert live_briefs is None or live_briefs.index_name == record.index_name
        tracking.dispose()
        if storage == "s3":  # nothing went to local disk: the table and stages are in S3
            assert not (home / "lancedb").exists() and not (home / "staging").exists()
            staging = StagingArea(storage_env["BATCH_PIPELINE_STAGING_DIR"], options)
            for shard in partitions.split(","):
                names = {f.base_name for f in (staging.root / shard).files(recursive=True)}
                assert {"collected.parquet", "chunks.parquet", "embeddings.parquet"} <= names


def test_the_shipped_production_instance_config_loads(tmp_path, databases):
    from dagster._core.run_coordinator import QueuedRunCoordinator

    dagster_home = tmp_path / "dagster_home"
    dagster_home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", dagster_home / "dagster.yaml")
    url = f"postgresql+psycopg2://postgres@127.0.0.1:5432/{databases[0]}"
    os.environ["DAGSTER_PG_URL"] = url
    try:
        instance = dg.DagsterInstance.from_config(str(dagster_home))
        assert isinstance(instance.run_coordinator, QueuedRunCoordinator)
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        assert instance.get_settings("sensors") == {"use_threads": True, "num_workers": 4}
        assert "postgres" in type(instance.run_storage).__name__.lower()
        instance.dispose()
    finally:
        del os.environ["DAGSTER_PG_URL"]
