"""Shared fixtures: a small real corpus, a temporary home, the real model loaded once, a FAKE
embedder, and real S3 (moto's server) and SQL (SQLite, PostgreSQL) sources.

Tests are arranged by level, one folder each; every test gets its folder's marker:
- `unit`: pure logic, no model and no services
- `engine`: the engine on real parts (the model, LanceDB, SQLite, PostgreSQL, moto)
- `dagster`: assets, checks, sensors and schedules run by Dagster in-process
- `system`: real subprocesses: the CLI, `dagster-daemon`, crashes, concurrent runs
`make test` runs them all; `make test-fast` all but `system`.
"""

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from batch_pipeline.config import ModelConfig, load_config  # noqa: E402
from batch_pipeline.index.partition import IndexPartition  # noqa: E402
from batch_pipeline.index.product import open_partition  # noqa: E402
from batch_pipeline.inference.fake import FakeEmbedder  # noqa: E402
from batch_pipeline.inference.models import resolve_model  # noqa: E402
from batch_pipeline.inference.openvino_model import EXPORT_CACHE_ENV  # noqa: E402
from batch_pipeline.inference.runner import EmbeddingRunner  # noqa: E402
from batch_pipeline.state.storage import resolve_storage  # noqa: E402
from tests.support import (  # noqa: E402
    POSTGRES_URL,
    write_config,
    write_corpus,
)
from tests.support import moto_server as start_moto_server  # noqa: E402

LEVELS = ("unit", "engine", "dagster", "system")


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """Mark each test with its level: the name of the folder it lives in."""
    root = Path(__file__).parent
    for item in items:
        relative = Path(item.fspath).relative_to(root)
        level = relative.parts[0] if len(relative.parts) > 1 else None
        if level not in LEVELS:
            raise pytest.UsageError(f"{relative}: tests live in one of {', '.join(LEVELS)}/")
        item.add_marker(getattr(pytest.mark, level))


@pytest.fixture(autouse=True)
def _no_dagster_instance_left_current():
    """Each test starts with no current Dagster instance. An instance's context sets a
    context variable (its definitions-state storage) that outlives a test when an instance is
    entered and never exited; once that instance is collected, a later test that loads
    definitions outside an instance fails with "undefined DagsterInstance weakref"."""
    from dagster._core.storage.defs_state.base import _current_storage

    token = _current_storage.set(None)
    yield
    _current_storage.reset(token)


@pytest.fixture(scope="session", autouse=True)
def _one_openvino_export_per_session(tmp_path_factory):
    """Every test's home shares one OpenVINO export folder (the exports are keyed by model,
    version and CPU), so a test does not pay the export again; subprocesses inherit it. The
    tests of the export itself give their own folder."""
    folder = tmp_path_factory.mktemp("openvino-exports")
    before = os.environ.get(EXPORT_CACHE_ENV)
    os.environ[EXPORT_CACHE_ENV] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(EXPORT_CACHE_ENV, None)
    else:
        os.environ[EXPORT_CACHE_ENV] = before


@pytest.fixture(scope="session")
def model():
    return resolve_model(ModelConfig())


@pytest.fixture(scope="session")
def runner(model):
    """The real all-MiniLM-L6-v2 in fp32 (exact comparisons), loaded once per session."""
    return EmbeddingRunner(model, device="cpu", dtype="float32")


@pytest.fixture(scope="session")
def chat_model_dir(tmp_path_factory):
    """The shipped SmolLM2-135M-Instruct, as `make chat-model` converted it under the home
    (`make test` does that first), or converted once per session from its GGUF file."""
    from batch_pipeline.inference.chat_models import convert_gguf, converted_dir, shipped_gguf

    made = converted_dir(resolve_storage().home)
    if (made / "config.json").is_file():
        return made
    return convert_gguf(shipped_gguf(), converted_dir(tmp_path_factory.mktemp("chat_home")))


@pytest.fixture(scope="session")
def fake_embedder(model):
    """The FAKE embedder (deterministic hashed bags of words; see inference/fake.py)."""
    return FakeEmbedder(model)


@pytest.fixture()
def workspace(tmp_path: Path) -> dict[str, Path]:
    docs = write_corpus(tmp_path / "docs")
    config = write_config(tmp_path / "pipeline.yaml")
    return {"root": tmp_path, "docs": docs, "config": config, "home": tmp_path / "home"}


@pytest.fixture()
def make_pipeline(workspace):
    def make(config_path: Path | None = None, home: Path | None = None) -> IndexPartition:
        config = load_config(config_path or workspace["config"])
        storage = resolve_storage(str(home or workspace["home"]))
        return open_partition(config, storage, config.collections[0].name)

    return make


@pytest.fixture()
def batch_api():
    """The LOOPBACK EMULATOR of the OpenAI Batch API (`tests/support/batch_api.py`), fresh
    for each test: the emulator, with its base URL as `.url`."""
    from tests.support.batch_api import BatchApiEmulator

    emulator = BatchApiEmulator()
    emulator.url = emulator.start()
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def moto_server():
    """moto in server mode on a loopback port, spoken to over HTTP (no in-process patching)."""
    with start_moto_server() as url:
        saved = {
            k: os.environ.get(k)
            for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
        }
        os.environ.update(
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
        yield url
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture()
def s3_bucket(moto_server):
    """A fresh bucket on the moto server, and a boto3 client for it."""
    import uuid

    import boto3

    client = boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1")
    bucket = f"docs-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_url(request, tmp_path):
    """A SQLAlchemy URL to a real SQLite file and to the local PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'docs.db'}"
    return POSTGRES_URL


@pytest.fixture()
def sql_table(sql_url):
    """A fresh `articles` table (unique name) with id, title, body, updated_at, deleted."""
    import uuid

    import sqlalchemy as sa

    name = f"articles_{uuid.uuid4().hex[:10]}"
    engine = sa.create_engine(sql_url)
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("title", sa.Text),
        sa.Column("body", sa.Text),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted", sa.Boolean, nullable=False, default=False),
    )
    table.create(engine)
    yield sql_url, name, engine, table
    table.drop(engine)
    engine.dispose()
