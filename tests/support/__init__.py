"""Plain helpers shared by the tests (no fixtures, no tests): small corpora and configs,
the CLI and daemon as subprocesses, and Dagster materialisation with the project's resources.

Fixtures live in `conftest.py`. Test modules import helpers from here, never from each other.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import dagster as dg
from dagster_aws.s3 import S3Resource

from batch_pipeline.config import load_config
from batch_pipeline.index.product import configured_generations
from batch_pipeline.stages import STAGES
from resources import InferenceResource, PipelineResource, ScoringResource
from resources.testing import FakeInferenceResource

# ------------------------------------------------------------------ corpora and configs

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


def write_briefs_config(
    root: Path, briefs: str = "", collection: str = "", more: str = "", glob: str | None = "**/*"
) -> Path:
    """A collection `handbook` over `root/docs` with briefs, from the sample's prompt and
    output schema (copied beside it as prompt.yaml and schema.json): `briefs` adds to its
    `briefs:` settings (", document_tokens: 40"), `collection` lines to the collection,
    `more` lines after it (another collection); `glob: None` takes the source's default.
    The `pipeline.yaml` written."""
    import shutil

    data = Path(__file__).resolve().parents[2] / "data"
    shutil.copy(data / "brief_prompt.yaml", root / "prompt.yaml")
    shutil.copy(data / "brief_schema.json", root / "schema.json")
    pattern = f', glob: "{glob}"' if glob else ""
    config = root / "pipeline.yaml"
    config.write_text(
        "collections:\n"
        "  - name: handbook\n"
        f"    source: {{kind: filesystem, path: docs{pattern}}}\n"
        f"{collection}"
        f"    briefs: {{prompt: prompt.yaml, output_schema: schema.json{briefs}}}\n"
        f"{more}"
    )
    return config


def many_articles(root: Path, count: int = 24) -> Path:
    """`count` Markdown articles of four sections each, of varied lengths."""
    root.mkdir(parents=True)
    for i in range(count):
        sections = "\n\n".join(
            f"## Topic {j}\n\nArticle {i} covers topic {j}: "
            + "details and steps. " * (3 + j * i % 7)
            for j in range(4)
        )
        (root / f"article-{i:02d}.md").write_text(f"# Article {i}\n\n{sections}\n")
    return root


def index_of(config_path: Path, collection: str = "handbook") -> str:
    """The generation table of a collection under a config (its model fingerprint)."""
    return configured_generations(load_config(config_path))[collection]


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


REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@contextmanager
def dagster_daemon(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """`dagster-daemon run` on this code location, output to `log`; stopped on leaving, with
    every process it started (its code server outlives a SIGTERM to the daemon)."""
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
            with suppress(subprocess.TimeoutExpired):
                daemon.wait(timeout=30)
            # then what outlives it in its group: its code server (`dagster api grpc`)
            with suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait(timeout=30)


# ----------------------------------------------------------------- servers

POSTGRES_URL = os.environ.get(
    "BATCH_PIPELINE_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def moto_server() -> Iterator[str]:
    """moto in server mode on a loopback port (S3 and SQS over HTTP), yielding its URL once
    it answers; stopped on leaving."""
    import time
    import urllib.request

    port = free_port()
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
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


# ----------------------------------------------------------------- Dagster

STAGE_ASSETS = [stage.asset for stage in STAGES]


def stage_resources(workspace: dict, fake_model: bool = False) -> dict:
    """The code location's resources over a test workspace; `fake_model` puts the FAKE
    embedder under the `inference` key (for tests where the model does not matter)."""
    inference = (
        FakeInferenceResource(device="cpu") if fake_model else InferenceResource(device="cpu")
    )
    return {
        "pipeline": PipelineResource(
            config_path=str(workspace["config"]), home=str(workspace["home"])
        ),
        "inference": inference,
        "scoring": ScoringResource(),
        "s3": S3Resource(),
    }


def materialize(
    workspace: dict,
    instance: dg.DagsterInstance,
    partition: str = "handbook",
    run_config: dict | None = None,
    tags: dict | None = None,
    fake_model: bool = False,
) -> dg.ExecuteInProcessResult:
    """The five stage assets of one partition, materialised in-process."""
    from batch_pipeline.definitions import build_definitions

    defs = build_definitions(workspace["config"])
    return dg.materialize(
        [defs.get_assets_def(name) for name in STAGE_ASSETS],
        partition_key=partition,
        instance=instance,
        resources=stage_resources(workspace, fake_model),
        run_config=run_config,
        tags=tags,
    )


def figure(value: object) -> int | float:
    """A number the UI shows as text (`"1,013"`, `"0.25"`: not charted) back as a number."""
    if isinstance(value, int | float):
        return value
    text = str(value).replace(",", "")
    return float(text) if any(c in text for c in ".eE") else int(text)


_FIGURE = re.compile(r"-?\d[\d,]*(\.\d+)?")


def metadata_values(metadata: dict) -> dict:
    """Metadata values; a number the UI shows as text (not charted) as a number, so tests
    compare counts whichever way they are shown (test_run_measures_metadata asserts which
    are charted)."""
    values = {k: v.value for k, v in metadata.items()}
    return {
        k: figure(v) if isinstance(v, str) and _FIGURE.fullmatch(v) else v
        for k, v in values.items()
    }


def metadata_of(result: dg.ExecuteInProcessResult, asset: str) -> dict:
    (event,) = result.asset_materializations_for_node(asset)
    return metadata_values(event.metadata)


def tick(  # noqa: ANN201
    defs,  # noqa: ANN001
    workspace: dict,
    instance,  # noqa: ANN001
    cursor=None,  # noqa: ANN001
    name="handbook",
    fake_model=False,
    look=True,
):
    """One evaluation of a collection's publish sensor. With `look` (the default), as if the
    sensor's interval has passed since `cursor` was written, so that the tick looks at the
    source; without it, at once (a tick that may skip without looking)."""
    if look and cursor:
        try:
            data = json.loads(cursor)
        except ValueError:  # an unreadable cursor, as a test hands it
            data = None
        if isinstance(data, dict) and "listed" in data:
            cursor = json.dumps({**data, "listed": 0})
    sensor = defs.get_sensor_def(f"{name}_publish_sensor")
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=stage_resources(workspace, fake_model)
    ) as context:
        return sensor(context)


def skewed_lease_clock(monkeypatch) -> dict[str, float]:  # noqa: ANN001
    """FAKE clock for the leases (`state.tracking.lease`): its monotonic time runs ahead by
    the returned `{"s": seconds}`, which a test raises to let a lease's term pass (as if the
    tracking store had not answered for that long)."""
    import time

    from batch_pipeline.state.tracking import lease as lease_module

    real, offset = time.monotonic, {"s": 0.0}

    class Clock:
        def __getattr__(self, name: str) -> object:
            return getattr(time, name)

        @staticmethod
        def monotonic() -> float:
            return real() + offset["s"]

    monkeypatch.setattr(lease_module, "time", Clock())
    return offset


class PathClock:
    """A fake timer for `auto`'s calibration: each call advances by the cost the path the
    watched `runner` is on (`(backend, dtype)`) is given, so a test decides which path is
    fastest while the vectors and their cosines stay real."""

    def __init__(self, cost: dict[tuple[str, str], float]) -> None:
        self.cost = cost
        self.now = 0.0
        self.runner = None  # the EmbeddingRunner being timed; None: time stands still

    def __call__(self) -> float:
        if self.runner is not None:
            self.now += self.cost[(self.runner.backend, self.runner.dtype)]
        return self.now


def stand_in_cross_encoder(folder: Path) -> Path:
    """FOR TESTS whose scoring engine is stood in for: a folder that reads as a one-label
    cross-encoder: its config, and weights holding a classifier head (one float32, in
    safetensors' layout: the header's length, the header, the data)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    config = {"architectures": ["BertForSequenceClassification"], "num_labels": 1}
    (folder / "config.json").write_text(json.dumps(config))
    header = json.dumps(
        {"classifier.weight": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}
    )
    (folder / "model.safetensors").write_bytes(
        len(header).to_bytes(8, "little") + header.encode() + bytes(4)
    )
    return folder
