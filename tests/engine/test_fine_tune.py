"""The ticket product's fine-tuned encoder (`tickets.training.fine_tune`) on real parts: the
real all-MiniLM-L6-v2 trained for a few steps on the sample's labelled tickets, LanceDB and
SQLite, through the command line as a user runs it."""

import json

import numpy as np
import pytest

from batch_pipeline.config import ConfigError
from batch_pipeline.inference.runner import EmbeddingRunner
from tests.engine.test_tickets import TRAINING_DAYS, labelled_workspace

RECIPE = "{steps: 4, batch_pairs: 8, learning_rate: 0.0001}"  # seconds on a CPU


def with_fine_tune(workspace, recipe: str = RECIPE) -> None:  # noqa: ANN001
    text = workspace.config.read_text()
    window = f'training: {{start: "{TRAINING_DAYS[0]}", end: "{TRAINING_DAYS[1]}"'
    assert window in text
    workspace.config.write_text(text.replace(window, f"{window}, fine_tune: {recipe}"))


def runners():  # noqa: ANN201
    """An embedder per model, loaded once: the base encoder and a fine-tuned one differ."""
    loaded: dict = {}
    return lambda model: loaded.setdefault(
        model.path, EmbeddingRunner(model, device="cpu", dtype="float32")
    )


def cosine(a, b) -> float:  # noqa: ANN001
    return float(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b))


def test_a_fine_tuned_encoder_is_a_model_generation_of_its_own(tmp_path, runner, capsys):
    from batch_pipeline import cli

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    frozen = workspace.product()
    with_fine_tune(workspace)
    product = workspace.product()
    # its own fingerprint, from the base model, the history and the recipe: no training yet
    assert (
        product.classifier.encoder_key is not None and not product.classifier.encoders.root.exists()
    )
    assert product.fingerprint != frozen.fingerprint
    assert product.classifier.model_fingerprint != frozen.classifier.model_fingerprint
    args = ["--config", str(workspace.config), "--home", str(workspace.home)]
    assert cli.main([*args, "run", "--day", TRAINING_DAYS[2], "--device", "cpu"]) == 0
    out = capsys.readouterr().out

    product = workspace.product()
    folder = product.classifier.encoders.folder(product.classifier.encoder_key)
    assert (folder / "fine_tune.json").is_file() and (folder / "config.json").is_file()
    record = product.registry.get(product.name, product.fingerprint)
    built = json.loads(record.model_config)
    assert built["training"]["fine_tune"]["key"] == product.classifier.encoder_key
    tuned = built["trained"]["fine_tune"]
    assert tuned["steps"] == 4 and tuned["stopped_by"] == "steps" and tuned["seconds"] > 0
    assert tuned["window_minutes"] == 240 and tuned["intents"] > 2
    # the rows were embedded by the fine-tuned encoder, and say so
    rows = product.intents.day_rows(product.index, TRAINING_DAYS[2]).to_pylist()
    assert rows and {r["model_fingerprint"] for r in rows} == {product.classifier.model_fingerprint}
    text = rows[0]["input_text"]
    ours = np.asarray(rows[0]["vector"], dtype=np.float32)
    tuned_runner = EmbeddingRunner(product.model, device="cpu", dtype="float32")
    to_tuned, to_base = (
        cosine(ours, tuned_runner.embed([text])[0]),
        cosine(ours, runner.embed([text])[0]),
    )
    assert to_tuned > 0.9999 and to_base < 0.999, (to_tuned, to_base)

    # the gate compares it with the frozen encoder's generation and says so
    assert "the frozen encoder" in out, out
    assert cli.main([*args, "generations", "list", "--product", "tickets"]) == 0
    assert "encoder fine-tuned (4 of 4 steps, " in capsys.readouterr().out
    review = product.review(runners())
    assert "baseline" in review.scores and "accuracy" in review.scores["baseline"]
    better = review.scores["candidate"]["accuracy"] > review.scores["baseline"]["accuracy"]
    assert (review.decision == "refused") == (not better), review
    if not better:
        assert "no better than the frozen encoder" in review.reason


def test_a_damaged_fine_tuned_encoder_is_trained_again_and_says_why(tmp_path, caplog):
    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    with_fine_tune(workspace, "{steps: 1, batch_pairs: 4}")
    product = workspace.product()
    model = product.model  # trained now
    folder = product.classifier.encoders.folder(product.classifier.encoder_key)
    assert (
        model.path == folder
        and product.classifier.encoders.verified(product.classifier.encoder_key) == folder
    )
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-100:] = bytes(100)  # damaged on disk
    weights.write_bytes(bytes(data))
    again = workspace.product()
    with caplog.at_level("WARNING"):
        retrained = again.model
    assert "model.safetensors changed since it was trained" in caplog.text
    assert (
        retrained.path == folder
        and again.classifier.encoders.verified(again.classifier.encoder_key) == folder
    )
    assert retrained.identity() == model.identity()  # the same model: the same fingerprint


def test_the_fine_tuned_encoder_retires_with_its_last_generation(tmp_path, runner):
    from batch_pipeline.generations.registry import GenerationRegistry

    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    with_fine_tune(workspace, "{steps: 1, batch_pairs: 4}")
    product = workspace.product()
    product.day(TRAINING_DAYS[2]).run("r1", lambda: EmbeddingRunner(product.model, "cpu"))
    folder = product.classifier.encoders.folder(product.classifier.encoder_key)
    assert folder.is_dir()
    registry = GenerationRegistry(product.tracking)
    registry.update(product.name, product.fingerprint, state="retired", retired_at=1.0)
    assert product.reviewer.drop_retired() == [product.index]
    assert not folder.exists()


def test_training_stops_at_its_minutes_and_needs_two_intents_to_pair(model, tmp_path):
    from batch_pipeline.config.tickets import FineTuneConfig
    from batch_pipeline.tickets.classifier.fine_tune import train_encoder

    texts = ["reset my password", "I forgot my password", "refund me", "I want my money back"]
    ticks = iter([0.0, 0.0, 30.0, 61.0, 61.0])  # the second step starts past a minute
    report = train_encoder(
        model,
        texts,
        [0, 0, 1, 1],
        FineTuneConfig(steps=50, max_minutes=1),
        tmp_path / "a",
        "k",
        clock=lambda: next(ticks),
    )
    assert report.stopped_by == "minutes" and report.steps == 2 and report.steps_planned == 50
    assert report.pairs_per_step == 2 and report.intents == 2
    with pytest.raises(ConfigError, match="at least two intents with two labelled texts"):
        train_encoder(model, texts, [0, 0, 1, -1], FineTuneConfig(), tmp_path / "b", "k")


def slow_training_run(config: str, home: str, marks: str) -> None:
    """A run that needs the fine-tuned encoder (in a process of its own), whose training is a
    stand-in that takes two seconds and marks that it ran."""
    import os
    import time
    from pathlib import Path

    from batch_pipeline.config import load_config
    from batch_pipeline.state.storage import resolve_storage
    from batch_pipeline.tickets.classifier import fine_tune
    from batch_pipeline.tickets.product import TicketProduct

    def slow_training(base, texts, labels, recipe, out, key, clock=time.monotonic):  # noqa: ANN001, ANN202
        (Path(marks) / str(os.getpid())).write_text(key)
        time.sleep(2.0)  # long enough for every other run to find the lease held
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text("{}")
        return fine_tune.FineTuneReport(key, 1, 1, 2.0, "steps", len(texts), 2, 2, 0.5)

    fine_tune.train_encoder = slow_training
    TicketProduct(load_config(Path(config)), resolve_storage(home)).model  # noqa: B018


def test_runs_that_need_one_encoder_at_once_train_it_once(tmp_path):
    """A backfill's days start together, each in a process of its own: one trains the
    encoder, the others wait for it under a lease in the tracking store and read it back."""
    import multiprocessing

    marks = tmp_path / "trainings"
    marks.mkdir()
    workspace = labelled_workspace(tmp_path, TRAINING_DAYS)
    with_fine_tune(workspace, "{steps: 1, batch_pairs: 4}")
    product = workspace.product()
    args = (str(workspace.config), str(workspace.home), str(marks))
    spawn = multiprocessing.get_context("spawn")
    runs = [spawn.Process(target=slow_training_run, args=args) for _ in range(3)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=300)
    assert [run.exitcode for run in runs] == [0, 0, 0]
    assert len(list(marks.iterdir())) == 1  # trained once
    assert product.classifier.encoders.verified(product.classifier.encoder_key) is not None
    # a run that finds the encoder trained and checked takes no lease
    later = workspace.product()
    later.tracking.landing_lease = None  # would fail if called
    assert later.model.path == product.classifier.encoders.verified(product.classifier.encoder_key)
