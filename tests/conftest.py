"""Shared fixtures: a small real corpus, a temporary home, and the real model loaded once."""

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from batch_pipeline.config import ModelConfig, load_config  # noqa: E402
from batch_pipeline.inference import EmbeddingRunner  # noqa: E402
from batch_pipeline.models import resolve_model  # noqa: E402
from batch_pipeline.pipeline import CollectionPipeline  # noqa: E402
from batch_pipeline.storage import resolve_storage  # noqa: E402

GUIDE = """\
# Resetting your password

Forgotten passwords can be reset from the sign-in page.

## Before you start

You need access to the email address on your account. Reset links expire after 30 minutes.

## Steps

1. Open the sign-in page.
2. Click **Forgot password** and enter your email address.
3. Follow the link in the email and choose a new password.

## Troubleshooting

If the email does not arrive, check your spam folder. Single sign-on users reset their
password with their identity provider instead.
"""

BILLING = """\
# Refund policy

Annual plans can be refunded pro rata within 30 days. Monthly plans are not refunded.

## How to ask

Write to billing support with your workspace URL and the invoice number.
"""

NOTES = """\
Plain text notes about the office.

The office opens at nine. Visitors sign in at the front desk.
"""


def write_corpus(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "account").mkdir(exist_ok=True)
    (root / "account" / "reset-password.md").write_text(GUIDE)
    (root / "refunds.md").write_text(BILLING)
    (root / "notes.txt").write_text(NOTES)
    return root


def write_config(path: Path, source: str = "docs", extra: str = "", name: str = "handbook") -> Path:
    path.write_text(
        textwrap.dedent(
            f"""\
            collections:
              - name: {name}
                source: {{kind: filesystem, path: {source}, glob: "**/*"}}
            {extra}"""
        )
    )
    return path


@pytest.fixture(scope="session")
def model():
    return resolve_model(ModelConfig())


@pytest.fixture(scope="session")
def runner(model):
    """The real all-MiniLM-L6-v2 in fp32 (exact comparisons), loaded once per session."""
    return EmbeddingRunner(model, device="cpu", dtype="float32")


@pytest.fixture()
def workspace(tmp_path: Path) -> dict[str, Path]:
    docs = write_corpus(tmp_path / "docs")
    config = write_config(tmp_path / "pipeline.yaml")
    return {"root": tmp_path, "docs": docs, "config": config, "home": tmp_path / "home"}


@pytest.fixture()
def make_pipeline(workspace):
    def make(config_path: Path | None = None, home: Path | None = None) -> CollectionPipeline:
        config = load_config(config_path or workspace["config"])
        storage = resolve_storage(str(home or workspace["home"]))
        return CollectionPipeline(config, storage, config.collections[0].name)

    return make


# ------------------------------------------------------------ subprocesses: CLI, daemon


def pipeline_env(config: Path, home: Path, **extra: str) -> dict[str, str]:
    """This process's environment, pointed at one pipeline config and home."""
    return {
        **os.environ,
        "BATCH_PIPELINE_CONFIG": str(config),
        "BATCH_PIPELINE_HOME": str(home),
        **extra,
    }


def cli_command(*args: str) -> list[str]:
    """The project's `batch-pipeline` CLI, run by this interpreter."""
    return [sys.executable, "-m", "batch_pipeline.cli", *args]


REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@contextmanager
def dagster_daemon(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`dagster-daemon run` on this code location, output to `log`; stopped on leaving."""
    with log.open("w") as out:
        daemon = subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-m", "batch_pipeline.definitions"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield daemon
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            try:
                daemon.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(daemon.pid, signal.SIGKILL)


# ----------------------------------------------------------------- S3 and SQL servers

POSTGRES_URL = os.environ.get(
    "BATCH_PIPELINE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def moto_server():
    """moto in server mode on a loopback port, spoken to over HTTP (no in-process patching)."""
    import subprocess
    import sys
    import time
    import urllib.request

    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=1)
            break
        except OSError:
            if time.time() > deadline or process.poll() is not None:
                process.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.2)
    saved = {
        k: os.environ.get(k)
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    yield url
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    process.terminate()
    process.wait(timeout=10)


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


def index_of(config_path: Path, collection: str = "handbook") -> str:
    """The generation table of a collection under a config (its model fingerprint)."""
    from batch_pipeline.fingerprint import generation_index, model_fingerprint

    config = load_config(config_path)
    chunking = config.collection(collection).chunking
    return generation_index(collection, model_fingerprint(resolve_model(config.model), chunking))
