"""The ticket product's fine-tuned encoder (`tickets.training.fine_tune`): the sentence
encoder trained on the labelled history and the taxonomy's examples before the head is, so
that what a support team's labels teach reaches the vectors, not only the head.

The recipe is the SetFit idea (Tunstall et al., 2022): contrastive pairs of two texts of one
intent, the batch's other pairs (each of another intent) as its negatives, with
sentence-transformers' MultipleNegativesRankingLoss, in a plain torch loop (its trainer would
add the `datasets` package for nothing here). Texts labelled `unknown` belong to no intent
and form no pair; an intent with one text gives none.

It learns from every labelled text but one validation fold (`training.encoder_texts`): the
head is then validated, calibrated and thresholded on that fold alone, on vectors the encoder
never fitted (on every fold, CLINC150's held-out accuracy read 0.994 against 0.924 on its
test set, and `unknown` was never used).

The encoder is a model of its own:
- its key (`encoder_key`) is the base model's identity, the labelled history's hash, the
  taxonomy's version, the input cut, the validation fraction and the recipe; a generation's
  fingerprint carries it;
- its weights live under the home (`<home>/encoders/<product>/<key>/`), written beside their
  place and moved in, with each file's SHA-256 and what training did (`fine_tune.json`),
  checked before they load; a folder that fails the check is trained again, with a warning
  naming why;
- training stops at `steps` or at `max_minutes`, whichever comes first, and says which;
- runs that need it at once (a backfill's days) train it once: the first holds a lease in
  the tracking store (`encoder:<product>:<key>`), the others wait for it and read it back; a
  run that finds the folder checked takes no lease;
- its folder is removed when the last generation using it is dropped.
"""

import logging
import random
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from batch_pipeline.config import ConfigError
from batch_pipeline.config.tickets import FineTuneConfig
from batch_pipeline.inference.fingerprint import fingerprint_of
from batch_pipeline.inference.folder_record import (
    folder_problem,
    read_folder_record,
    write_folder_record,
)
from batch_pipeline.inference.models import ResolvedModel, discard_folder
from batch_pipeline.inference.weights import every_weight_loaded

log = logging.getLogger(__name__)

ENCODERS = "encoders"  # under the home: <home>/encoders/<product>/<key>/
RECORD_FILE = "fine_tune.json"  # in an encoder's folder: what training did, each file's hash
SINCE = "since it was trained"


@dataclass(frozen=True)
class FineTuneReport:
    """What training an encoder did: the steps run, of the recipe's, the seconds, what ended
    it (`steps`, or `minutes`: the budget), and what it learned from."""

    key: str
    steps: int
    steps_planned: int
    seconds: float
    stopped_by: str  # "steps" or "minutes"
    texts: int
    intents: int
    pairs_per_step: int
    last_loss: float | None

    def as_dict(self) -> dict:
        return asdict(self)


def encoder_key(
    base: ResolvedModel,
    history_hash: str,
    taxonomy_version: str,
    max_tokens: int,
    validation_fraction: float,
    recipe: FineTuneConfig,
) -> str:
    """What the fine-tuned encoder's weights depend on (its folder's name): the texts it
    learns from are the labelled ones less the fold that validates the head, which
    `validation_fraction` sets."""
    return fingerprint_of(
        {
            "base": base.identity(),
            "history": history_hash,
            "taxonomy": taxonomy_version,
            "max_tokens": max_tokens,
            "validation_fraction": validation_fraction,
            "recipe": recipe.model_dump(mode="json"),
        }
    )


def fine_tuned_name(base_name: str, key: str) -> str:
    """The fine-tuned encoder's name, as runs, rows and reports show it."""
    return f"{base_name} fine-tuned {key}"


def fine_tuned_model(base: ResolvedModel, key: str, folder: Path) -> ResolvedModel:
    """The fine-tuned encoder as a model: the base model's settings, its own folder, and an
    identity that is the base model's and the key (not its files' hash, which training on
    another machine need not reproduce bit for bit)."""
    return replace(
        base,
        name=fine_tuned_name(base.name, key),
        path=folder,
        files_hash=fingerprint_of({"base": base.files_hash, "fine_tune": key}),
    )


def intent_groups(texts: Sequence[str], labels: Sequence[int]) -> dict[int, list[str]]:
    """The texts of each intent that has two or more (those that can form a pair); labels
    below zero (`unknown`, out of scope) belong to none."""
    groups: dict[int, list[str]] = defaultdict(list)
    seen: set[tuple[int, str]] = set()
    for text, label in zip(texts, labels, strict=True):
        if label >= 0 and (label, text) not in seen:
            seen.add((label, text))
            groups[label].append(text)
    return {label: group for label, group in groups.items() if len(group) >= 2}


def train_encoder(
    base: ResolvedModel,
    texts: Sequence[str],
    labels: Sequence[int],
    recipe: FineTuneConfig,
    out: Path,
    key: str,
    clock: Callable[[], float] = time.monotonic,
) -> FineTuneReport:
    """Fine-tune `base` on (text, another text of its intent) pairs and save it to `out`
    (a sentence-transformers folder); a ConfigError in one line where fewer than two intents
    have two texts."""
    groups = intent_groups(texts, labels)
    if len(groups) < 2:
        raise ConfigError(
            "tickets.training.fine_tune: needs at least two intents with two labelled texts "
            f"(taxonomy examples or labelled tickets) each; {len(groups)} have"
        )
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()  # the run prints its own lines
    torch.manual_seed(recipe.seed)
    draw = random.Random(recipe.seed)
    with every_weight_loaded(base.path, "the encoder to fine-tune"):
        model = SentenceTransformer(str(base.path), device="cpu", local_files_only=True)
    model.max_seq_length = base.max_seq_length
    loss = MultipleNegativesRankingLoss(model)
    optimiser = torch.optim.AdamW(model.parameters(), lr=recipe.learning_rate)
    steps = recipe.steps
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, (steps - s) / steps)
    )
    intents = sorted(groups)
    per_step = min(recipe.batch_pairs, len(intents))
    budget = recipe.max_minutes * 60
    model.train()
    started, done, last_loss, stopped_by = clock(), 0, None, "steps"
    for _ in range(steps):
        if clock() - started >= budget:
            stopped_by = "minutes"
            break
        anchors, positives = [], []
        for intent in draw.sample(intents, per_step):  # one pair per intent: no false negatives
            anchor, positive = draw.sample(groups[intent], 2)
            anchors.append(anchor)
            positives.append(positive)
        value = loss([model.preprocess(anchors), model.preprocess(positives)], None)
        optimiser.zero_grad()
        value.backward()
        optimiser.step()
        schedule.step()
        done += 1
        last_loss = float(value.detach())
    model.eval()
    seconds = clock() - started
    report = FineTuneReport(
        key=key,
        steps=done,
        steps_planned=steps,
        seconds=round(seconds, 3),
        stopped_by=stopped_by,
        texts=sum(len(g) for g in groups.values()),
        intents=len(groups),
        pairs_per_step=per_step,
        last_loss=None if last_loss is None else round(last_loss, 5),
    )
    model.save(str(out))
    return report


class EncoderStore:
    """The fine-tuned encoders of one product, under `<home>/encoders/<product>/`."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def folder(self, key: str) -> Path:
        return self.root / key

    def report(self, key: str) -> FineTuneReport | None:
        """What training the encoder `key` did, as its folder records it."""
        record = read_folder_record(self.folder(key), RECORD_FILE)
        if record is None or not isinstance(record.get("training"), dict):
            return None
        try:
            return FineTuneReport(**record["training"])
        except TypeError:
            return None

    def verified(self, key: str) -> Path | None:
        """The encoder's folder where it is there and unchanged since it was trained; None
        where it is not there, or (with a warning naming why, the folder removed) changed."""
        folder = self.folder(key)
        if not folder.exists():
            return None
        problem = folder_problem(folder, RECORD_FILE, SINCE)
        if problem is None:
            return folder
        log.warning("the fine-tuned encoder %s %s: training it again", folder, problem)
        discard_folder(folder)
        return None

    def ready(
        self,
        key: str,
        base: ResolvedModel,
        recipe: FineTuneConfig,
        examples: Callable[[], tuple[list[str], list[int]]],
    ) -> ResolvedModel:
        """The fine-tuned encoder `key` of `base`: its checked folder, or trained now from
        `examples()` (texts and their intents' numbers) under `recipe`."""
        folder = self.verified(key)
        if folder is None:
            folder = self._train(key, base, recipe, *examples())
        return fine_tuned_model(base, key, folder)

    def _train(
        self,
        key: str,
        base: ResolvedModel,
        recipe: FineTuneConfig,
        texts: list[str],
        labels: list[int],
    ) -> Path:
        """Train into a folder beside its place, record it, then move it in (another
        process's, finished first, is kept)."""
        folder = self.folder(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".training-{key}-", dir=self.root))
        except OSError as error:
            raise ConfigError(
                f"cannot write the fine-tuned encoder under {self.root}: {error.strerror or error}"
            ) from None
        try:
            report = train_encoder(base, texts, labels, recipe, staging, key)
            write_folder_record(
                staging, RECORD_FILE, {"base": base.name, "training": report.as_dict()}
            )
            log.info(
                "fine-tuned the encoder %s: %d of %d steps in %.0f s (ended by %s)",
                key,
                report.steps,
                report.steps_planned,
                report.seconds,
                report.stopped_by,
            )
            try:
                staging.rename(folder)
            except OSError:  # another process trained it first: keep theirs
                if folder_problem(folder, RECORD_FILE, SINCE) is not None:
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return folder

    def remove(self, key: str) -> bool:
        """Remove the encoder `key`'s folder (its last generation was dropped)."""
        folder = self.folder(key)
        if not folder.exists():
            return False
        discard_folder(folder)
        return True
