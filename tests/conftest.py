"""Shared fixtures: a small real corpus, a temporary home, and the real model loaded once."""

import os
import textwrap
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
