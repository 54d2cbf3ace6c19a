"""The execution engine: order, fidelity against sentence-transformers, OOM back-off."""

import hashlib
import time

import numpy as np
import pytest
import torch

from batch_pipeline.inference.openvino_model import EXPORT_CACHE_ENV, openvino_dtypes
from batch_pipeline.inference.runner import EmbeddingRunner, RunStats
from tests.support import PathClock

TEXTS = [
    "Reset links expire after 30 minutes.",
    "Annual plans can be refunded pro rata within 30 days, monthly plans are not refunded at all.",
    "ok",
    "Single sign-on users reset their password with their identity provider instead. " * 6,
    "The office opens at nine.",
    "Webhook payloads are signed with HMAC-SHA256 and retried for 24 hours on failure.",
] * 3


def fake_cuda_oom(max_batch: int, attempts: list[int]):
    """FAKE fault injection: raises torch's real OOM type for batches above `max_batch`."""

    def inject(texts):
        attempts.append(len(texts))
        if len(texts) > max_batch:
            raise torch.OutOfMemoryError("CUDA out of memory (fake, injected by the test)")

    return inject


def test_embed_matches_sentence_transformers_encode(runner):
    ours = runner.embed(TEXTS, token_budget=256, max_batch_size=4)
    reference = runner.model.encode(TEXTS, batch_size=32, convert_to_numpy=True)
    cosine = (ours * reference).sum(axis=1) / (
        np.linalg.norm(ours, axis=1) * np.linalg.norm(reference, axis=1)
    )
    assert cosine.min() > 0.9999


def test_bf16_on_cpu_stays_within_the_fidelity_bar(model, runner):
    bf16 = EmbeddingRunner(model, device="cpu", dtype="bfloat16")
    ours = bf16.embed(TEXTS)
    reference = runner.model.encode(TEXTS, batch_size=32, convert_to_numpy=True)
    cosine = (ours * reference).sum(axis=1)
    assert cosine.min() > 0.9999
    assert not np.allclose(ours, reference, atol=1e-7)  # it really ran in reduced precision


def test_results_do_not_depend_on_batching(runner):
    a = runner.embed(TEXTS, token_budget=64, max_batch_size=1)
    b = runner.embed(TEXTS, token_budget=8192, max_batch_size=128)
    np.testing.assert_allclose(a, b, atol=1e-5)


def test_order_is_preserved(runner):
    forward = runner.embed(TEXTS)
    backward = runner.embed(TEXTS[::-1])
    np.testing.assert_allclose(forward, backward[::-1], atol=1e-5)


def in_position_order(yielded) -> np.ndarray:
    """The vectors `run` yielded, stacked in position order."""
    got = {p: v for positions, vectors in yielded for p, v in zip(positions, vectors, strict=True)}
    return np.stack([got[p] for p in sorted(got)])


def inject_faults(monkeypatch, runner, fault):
    """FAKE faults: `fault(texts)` runs before each forward pass of the real runner."""
    forward = runner._forward

    def faulty(texts, features):
        fault(texts)
        return forward(texts, features)

    monkeypatch.setattr(runner, "_forward", faulty)


def test_run_yields_positions_for_each_batch(runner):
    batches = [([4, 1], [TEXTS[4], TEXTS[1]]), ([0, 3, 2], [TEXTS[0], TEXTS[3], TEXTS[2]])]
    got = {}
    for positions, vectors in runner.run(batches):
        for p, v in zip(positions, vectors, strict=True):
            got[p] = v
    reference = runner.embed(TEXTS[:5])
    for p in range(5):
        np.testing.assert_allclose(got[p], reference[p], atol=1e-5)


def test_carried_token_ids_are_padded_not_tokenised_again(runner, monkeypatch):
    # as a fresh runner: checked once
    monkeypatch.setattr(runner.batch_features, "carried_ids", None)
    token_ids = runner.token_ids(TEXTS)
    order = sorted(range(len(TEXTS)), key=lambda i: len(token_ids[i]))
    batches = [
        (rows, [TEXTS[i] for i in rows], [token_ids[i] for i in rows])
        for rows in (order[:7], order[7:])
    ]
    stats = RunStats()
    got = in_position_order(runner.run(batches, stats))
    assert stats.tokenized == 0 and stats.inputs == len(TEXTS)
    reference = runner.model.encode(TEXTS, batch_size=32, convert_to_numpy=True)
    np.testing.assert_allclose(got, reference, atol=1e-5)
    # batches without ids (a caller with texts only) are tokenised, as before
    texts_only = RunStats()
    list(runner.run([(list(range(3)), TEXTS[:3])], texts_only))
    assert texts_only.tokenized == 3


def test_token_ids_the_model_s_tokenizer_does_not_give_are_not_used(runner, monkeypatch, caplog):
    """Ids counted by a tokenizer that reads the texts otherwise (other settings, another
    model's vocabulary) would embed the wrong inputs: the first batch's check refuses them,
    and the runner tokenises every batch after it too."""
    monkeypatch.setattr(runner.batch_features, "carried_ids", None)
    wrong = runner.token_ids(TEXTS[::-1])  # another text's ids for each text
    batches = [(list(range(6)), TEXTS[:6], wrong[:6]), (list(range(6, 18)), TEXTS[6:], wrong[6:])]
    stats = RunStats()
    with caplog.at_level("WARNING"):
        got = in_position_order(runner.run(batches, stats))
    assert stats.tokenized == len(TEXTS)
    assert "differ from what model 'all-MiniLM-L6-v2'" in caplog.text
    reference = runner.model.encode(TEXTS, batch_size=32, convert_to_numpy=True)
    np.testing.assert_allclose(got, reference, atol=1e-5)
    right = RunStats()
    list(runner.run([(list(range(3)), TEXTS[:3], runner.token_ids(TEXTS[:3]))], right))
    assert right.tokenized == 3  # refused for the runner's life, not batch by batch


def test_carried_ids_over_the_model_s_limit_are_cut_by_its_tokenizer(runner, monkeypatch):
    from batch_pipeline.inference.models import load_tokenizer
    from batch_pipeline.text.chunking import model_token_ids

    monkeypatch.setattr(runner.batch_features, "carried_ids", None)
    long = TEXTS[3] * 12  # prepare keeps ids uncut: here over the 256 the model reads
    texts = [TEXTS[0], long]
    carried = model_token_ids(load_tokenizer(runner.resolved.path), texts)
    assert len(carried[1]) > runner.resolved.max_seq_length
    stats = RunStats()
    [(_, vectors)] = list(runner.run([([0, 1], texts, carried)], stats))
    assert stats.tokenized == 2
    reference = runner.model.encode(texts, convert_to_numpy=True)
    np.testing.assert_allclose(vectors, reference, atol=1e-5)


def test_out_of_memory_splits_the_batch_and_lowers_the_budget(runner, monkeypatch):
    reference = runner.embed(TEXTS)
    attempts: list[int] = []
    inject_faults(monkeypatch, runner, fake_cuda_oom(3, attempts))
    stats = RunStats()
    out = {}
    batches = [(list(range(0, 8)), TEXTS[0:8]), (list(range(8, 18)), TEXTS[8:18])]
    for positions, vectors in runner.run(batches, stats):
        for p, v in zip(positions, vectors, strict=True):
            out[p] = v
    assert attempts[:3] == [8, 4, 2]  # split in two until it fits
    assert max(attempts[6:]) <= 4  # the lowered budget applies to the rest of the run
    assert stats.oom_splits >= 2
    assert not stats.failed
    assert sorted(out) == list(range(18))
    np.testing.assert_allclose(np.stack([out[i] for i in range(18)]), reference, atol=1e-5)


def test_an_input_that_fails_alone_is_reported_not_dropped(runner, monkeypatch):
    def inject(texts):  # FAKE: one poisoned input always runs out of memory
        if any(t == "ok" for t in texts):
            raise torch.OutOfMemoryError("CUDA out of memory (fake)")

    inject_faults(monkeypatch, runner, inject)
    stats = RunStats()
    seen = []
    for positions, _ in runner.run([(list(range(6)), TEXTS[:6])], stats):
        seen += positions
    assert sorted(seen) == [0, 1, 3, 4, 5]
    assert list(stats.failed) == [2]
    assert "out of memory" in stats.failed[2]


def test_other_errors_are_not_swallowed(runner, monkeypatch):
    def inject(texts):  # FAKE
        raise RuntimeError("device lost")

    inject_faults(monkeypatch, runner, inject)
    with pytest.raises(RuntimeError, match="device lost"):
        list(runner.run([([0], ["x"])]))


def test_identical_inputs_are_embedded_once_and_fanned_out(make_pipeline, runner, workspace):
    same = "# FAQ\n\n## Contact\n\nWrite to support@relay.example.\n"
    (workspace["docs"] / "faq-a.md").write_text(same)
    (workspace["docs"] / "faq-b.md").write_text(same)
    pipeline = make_pipeline()
    out = pipeline.run("run-1", runner)
    assert out["plan"].duplicates_folded == 1
    rows = pipeline.store.open(pipeline.index).to_arrow().to_pylist()
    a = [r for r in rows if r["doc_id"] == "faq-a.md"]
    b = [r for r in rows if r["doc_id"] == "faq-b.md"]
    assert len(a) == len(b) == 1
    assert a[0]["input_hash"] == b[0]["input_hash"]
    np.testing.assert_array_equal(a[0]["vector"], b[0]["vector"])


def test_the_benchmark_gives_repeated_inputs_their_vectors(fake_embedder, model):
    """A chunk set with a repeated text reported a minimum cosine of 0.0: the repeats' rows
    were left at zeros (the pipeline itself was right)."""
    from batch_pipeline.bench.embedding import min_cosine, run_engine
    from batch_pipeline.inference.batching import PlanSettings

    texts = ["reset your password", "refund policy", "reset your password", "office hours"] * 3
    measured, _ = run_engine(fake_embedder, texts, PlanSettings(64, 2), model)
    expected = fake_embedder.embed(texts)
    assert min_cosine(measured.vectors, expected) > 0.9999  # was 0.0
    assert (measured.vectors[2] == measured.vectors[0]).all()


def test_auto_calibrates_on_the_first_inputs_and_caches_the_decision(
    model, runner, monkeypatch, tmp_path
):
    """A fake timer makes OpenVINO fp32 the fastest path, torch bf16 the second; the
    vectors, their cosines and the OpenVINO export are real."""
    from batch_pipeline.inference import devices
    from batch_pipeline.inference.runner import EmbeddingRunner

    monkeypatch.setattr(devices, "cpu_has_bf16_instructions", lambda: True)
    monkeypatch.setattr(devices, "openvino_dtypes", lambda: ["float32"])
    monkeypatch.delenv(EXPORT_CACHE_ENV)  # the export goes under this home, as it does for users
    timer = PathClock(
        {("torch", "float32"): 1.0, ("torch", "bfloat16"): 0.7, ("openvino", "float32"): 0.5}
    )

    cache = tmp_path / "calibration.json"
    auto = EmbeddingRunner(model, device="cpu", calibration_cache=cache, timer=timer)
    timer.runner = auto
    assert auto.dtype_decision is None and (auto.backend, auto.dtype) == ("torch", "float32")
    texts = [f"how do I change setting number {i} of my account" for i in range(20)]
    stats, started = RunStats(), time.perf_counter()
    vectors = np.zeros((len(texts), auto.dimension), np.float32)
    for positions, part in auto.run([(list(range(len(texts))), texts)], stats):
        vectors[positions] = part
    wall = time.perf_counter() - started
    decision = auto.dtype_decision
    assert decision.candidate == ("openvino", "float32") == (auto.backend, auto.dtype)
    assert not decision.cached and "2.00x as fast as torch/float32" in decision.reason
    # measuring took time of its own, and so did the export: the throughput leaves both out
    assert decision.seconds > 0.05 and decision.metadata()["dtype_calibration_seconds"] > 0
    assert decision.export_seconds > 0 and (tmp_path / "models" / "openvino").is_dir()
    assert 0 < stats.seconds <= wall - decision.seconds - decision.export_seconds + 0.005
    assert decision.min_cosine > 0.9999
    reference = runner.embed(texts)
    assert float(np.min(np.sum(vectors * reference, axis=1))) > 0.9999
    assert cache.is_file()

    again = EmbeddingRunner(model, device="cpu", calibration_cache=cache, timer=timer)
    timer.runner, before = again, timer.now
    again.embed(texts[:3])
    assert again.dtype_decision.cached and again.backend == "openvino"
    assert timer.now == before  # nothing was timed: the cache answered
    assert again.dtype_decision.export_seconds == 0  # and the export was read back

    stricter = EmbeddingRunner(
        model, device="cpu", calibration_cache=cache, fidelity_min_cosine=1.000001
    )
    stricter.embed(texts[:3])  # no path can be that faithful: torch fp32, from the cache
    assert stricter.dtype_decision.cached and stricter.dtype_decision.candidate == (
        "torch",
        "float32",
    )

    explicit = EmbeddingRunner(model, device="cpu", dtype="float32", calibration_cache=cache)
    explicit.embed(texts[:3])
    assert (explicit.backend, explicit.dtype) == ("torch", "float32")
    assert explicit.dtype_decision.reason == "set explicitly"


def test_the_openvino_export_is_made_once_and_keeps_the_vectors_within_fidelity(
    model, runner, tmp_path
):
    exports = tmp_path / "exports"
    # explicit: exported with the model (with dtype auto, where the CPU offers bf16 too, the
    # export would wait for calibration)
    first = EmbeddingRunner(
        model, device="cpu", backend="openvino", dtype="float32", export_cache=exports
    )
    assert first.backend == "openvino" and first.export_seconds > 0
    (folder,) = exports.iterdir()
    weights = folder / "model.bin"
    made = weights.stat().st_mtime_ns
    ours = first.embed(TEXTS, token_budget=256, max_batch_size=4)
    reference = runner.model.encode(TEXTS, batch_size=32, convert_to_numpy=True)
    assert float(np.min(np.sum(ours * reference, axis=1))) > 0.9999
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)  # normalised

    second = EmbeddingRunner(
        model, device="cpu", backend="openvino", dtype="float32", export_cache=exports
    )
    assert second.export_seconds == 0 and weights.stat().st_mtime_ns == made
    assert [p.name for p in exports.iterdir()] == [folder.name]  # no half-made exports left
    np.testing.assert_allclose(second.embed(TEXTS), first.embed(TEXTS), atol=1e-5)
    if "bfloat16" in openvino_dtypes():  # where the CPU has bf16: the same export, compiled so
        reduced = EmbeddingRunner(
            model, device="cpu", backend="openvino", dtype="bfloat16", export_cache=exports
        )
        assert reduced.export_seconds == 0 and reduced.dtype == "bfloat16"
        vectors = reduced.embed(TEXTS, token_budget=256, max_batch_size=4)
        assert float(np.min(np.sum(vectors * reference, axis=1))) > 0.9999


def test_openvino_is_refused_off_the_cpu_and_with_int8(model):
    from batch_pipeline.inference.devices import pick_backend

    with pytest.raises(ValueError, match="runs on the CPU"):
        pick_backend("cuda", "openvino")
    with pytest.raises(ValueError, match="backend must be one of"):
        pick_backend("cpu", "onnx")
    with pytest.raises(ValueError, match="int8 dynamic quantisation runs on backend torch"):
        EmbeddingRunner(model, device="cpu", backend="openvino", quantize_int8=True)


def test_the_model_s_first_call_is_a_warm_up_outside_the_run_s_marginal_time(model):
    fresh = EmbeddingRunner(model, device="cpu", dtype="float32")
    first, second = RunStats(), RunStats()
    out = list(fresh.run([([0, 1], ["reset a password", "change the email"])], first))
    assert [positions for positions, _ in out] == [[0, 1]]  # the warm-up yields nothing
    list(fresh.run([([0], ["delete the account"])], second))
    assert first.warmup_seconds > 0 and first.inputs == 2
    assert second.warmup_seconds == 0  # once per loaded model


@pytest.mark.parametrize("damage", ["zeroed", "truncated", "rehashed", "unhashed"])
def test_a_damaged_openvino_export_is_made_again_and_says_why(
    model, runner, tmp_path, caplog, damage
):
    """A bad block or an interrupted copy of the export cache was used as it was: vectors at
    cosine 0.17 to correct ones, or a traceback on every run. Now the files' hashes, a read
    and a probe against the source model are checked first, and a bad export is made again."""
    import json
    import logging

    exports = tmp_path / "exports"

    def openvino() -> EmbeddingRunner:
        return EmbeddingRunner(
            model, device="cpu", backend="openvino", dtype="float32", export_cache=exports
        )

    openvino()
    (folder,) = exports.iterdir()
    weights, info = folder / "model.bin", folder / "export.json"
    data = bytearray(weights.read_bytes())
    if damage == "truncated":
        weights.write_bytes(bytes(data[: len(data) // 2]))
    else:
        if damage != "unhashed":
            data[-(10 << 20) :] = bytes(10 << 20)  # the last 10 MiB (the upper layers) zeroed
            weights.write_bytes(bytes(data))
        written = json.loads(info.read_text())
        if damage == "rehashed":  # damaged where no hash can tell: the probe does
            written["sha256"]["model.bin"] = hashlib.sha256(bytes(data)).hexdigest()
        if damage == "unhashed":  # written before the hashes were
            written.pop("sha256")
        info.write_text(json.dumps(written))
    caplog.set_level(logging.WARNING)
    again = openvino()
    assert again.export_seconds > 0  # made again
    said = {
        "zeroed": "model.bin changed since it was written",
        "truncated": "model.bin changed since it was written",
        "rehashed": "embeds its probe inputs at a minimum cosine of",
        "unhashed": "was written without hashes of its files",
    }[damage]
    assert any(said in record.getMessage() for record in caplog.records), caplog.text
    ours = again.embed(TEXTS, token_budget=256, max_batch_size=4)
    reference = runner.model.encode(TEXTS, batch_size=32, convert_to_numpy=True)
    assert float(np.min(np.sum(ours * reference, axis=1))) > 0.9999
    assert [p.name for p in exports.iterdir()] == [folder.name]  # the bad one is gone


def test_an_openvino_export_that_cannot_be_written_is_one_line(model, tmp_path, monkeypatch):
    """A full disk gave a raw traceback; now a ModelLoadError naming the cache and why."""
    import errno

    from batch_pipeline.inference import openvino_model
    from batch_pipeline.inference.devices import ModelLoadError

    def full(*_: object, **__: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(openvino_model.tempfile, "mkdtemp", full)
    with pytest.raises(ModelLoadError, match="cannot write the OpenVINO export under .*: No space"):
        EmbeddingRunner(
            model, device="cpu", backend="openvino", dtype="float32", export_cache=tmp_path / "x"
        )
