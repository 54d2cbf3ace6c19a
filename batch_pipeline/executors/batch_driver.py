"""The Batch API driver every `openai-batch` executor shares, whatever its model family: the
plan's requests as OpenAI batch files (`executors.batch_file`), handed to any OpenAI-compatible
Batch API (a provider's, or a self-hosted gateway's) through the official `openai` client, and
collected when the provider has run them. The families differ only in the request lines they
write (`/v1/chat/completions`, `/v1/embeddings`) and what they make of an answer
(`BatchWork`); the driver is one loop, and so is the execute around it
(`executors.provider_execute`).

A provider's batch can take hours (its completion window is 24 h), so execute never holds a
worker for it unless asked to (`BatchApiSettings.wait_seconds`):

1. **Collect.** Every batch a run of this partition submitted and no run has collected yet
   (the tracking store records each one by id) is asked for its status. A finished one's
   output and error files are downloaded and joined by `custom_id`, in any order; its
   answers go into the partition's checkpoints, judged as every executor's are. Requests
   that failed for a reason that says nothing of them (expired, throttled, a 5xx) are sent
   again once, in a new batch of only their ids; a 4xx refusal is that input's failure.
2. **Submit.** With no batch in flight, the plan's inputs that no checkpoint holds and this
   run has not sent are written as batch files (split at 50,000 requests or 200 MB), uploaded
   and submitted, and each batch id is recorded before anything else happens. A rerun while
   a batch is in flight submits nothing. A crash after a submission loses nothing: the next
   run collects the batch it recorded.
3. **Wait**, polling with backoff, for at most `wait_seconds` (None: until every batch has
   finished). What is still in flight then stays so: execute returns with what it collected,
   land lands that, and the next run (the provider-batch sensor starts one when the batches
   finish) collects the rest. An input with no answer is not a failure: it is planned again.

The key is read from the environment variable `api_key_env` names, and never written: the
driver's errors are stripped of it (a provider's 401 message may quote part of it).
"""

import json
import random
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from batch_pipeline.executors.batch_api import BatchApiSettings, BatchLedger, ProviderBatchError
from batch_pipeline.executors.batch_client import (
    FILE_HASH,
    BatchClient,
    NotFound,
    OpenAIBatches,
    RemoteBatch,
    file_digest,
)
from batch_pipeline.executors.batch_file import BatchResult, write_batch_files
from batch_pipeline.faults import crash_point
from batch_pipeline.measures.progress import Progress
from batch_pipeline.stages.checkpointed import CheckpointedOutput
from batch_pipeline.stages.outcome import ExecuteOutcome
from batch_pipeline.stages.provider_batches import ProviderBatches
from batch_pipeline.state.staging import StagePath, read_batches
from batch_pipeline.state.tracking import FINAL_STATUSES, GIVEN_UP, ProviderBatch

FIRST, RESUBMITTED = 1, 2  # a batch's attempt: a request is sent at most twice in a run


@dataclass
class BatchWork:
    """What one family's execute hands the driver: the endpoint its lines ask, the plan's
    inputs, the checkpointed output (whose `done_keys` are the inputs answered), the request
    lines of the plan's inputs not in a given set (streamed), and what to do with the answers
    a finished batch settled (`take`: into the output, and its summary's counts)."""

    endpoint: str
    keys: set[str]
    output: CheckpointedOutput
    requests: Callable[[set[str]], Iterable[dict]]
    take: Callable[[list[BatchResult]], None]


def kept_answers(
    answered: list[BatchResult],
    has_answer: Callable[[BatchResult], bool],
    missing: str,
    summary: ExecuteOutcome,
    planned_tokens: dict[str, int],
) -> tuple[list[BatchResult], int]:
    """Of a settled batch's answers, those that carry what the family asked for, and their
    tokens (the provider's usage, else the plan's count); the rest are their inputs'
    failures in `summary` (their error, else `missing`), whose family's `stats` count the
    tokens and batches. The provider's padding is not billed, so the tokens are counted as
    padded tokens too."""
    kept = [r for r in answered if has_answer(r)]
    for failed in (r for r in answered if not has_answer(r)):
        summary.failed_inputs[failed.key] = failed.error or missing
    tokens = sum(r.prompt_tokens or planned_tokens[r.key] for r in kept)
    stats = summary.stats
    stats.tokens += tokens
    stats.padded_tokens += tokens
    stats.batches += 1
    return kept, tokens


@dataclass
class BatchDriver:
    """Collects, submits and waits for one execute (see the module docstring)."""

    api: BatchApiSettings
    ledger: BatchLedger
    run_id: str
    batches: ProviderBatches  # what the run did with the provider's batches, for its record
    sleep: Callable[[float], None] = time.sleep
    sent: set[str] = field(default_factory=set)  # keys this run submitted or collected
    submitted: bool = False
    provider: type = OpenAIBatches  # the provider's client (`BatchClient`), by its API

    def drive(self, work: BatchWork) -> None:
        """Collect, submit, wait: until nothing is in flight or the wait is over."""
        key = self.api.api_key(self.provider.key_env)
        with self.provider.opened(self.api, key) as client:
            self._drive(client, work)

    def drive_counted(self, work: BatchWork, tracker: Progress, summary: ExecuteOutcome) -> None:
        """`drive`, with `tracker` showing the run at work meanwhile: the summary's seconds
        are the drive's (submitting, polling, reading), and its `unanswered` the plan's
        inputs the provider has answered neither way yet (neither landed nor failed)."""
        tracker.working()
        began = time.perf_counter()
        self.drive(work)
        summary.stats.seconds = time.perf_counter() - began
        answered = work.output.done_keys | summary.failed_inputs.keys()
        summary.unanswered = len(work.keys - answered)
        tracker.finish()

    def _drive(self, client: BatchClient, work: BatchWork) -> None:
        wait = self.api.wait_seconds
        deadline = None if wait is None else time.monotonic() + wait
        pause = self.api.poll_seconds
        while True:
            flying = self._collect(client, work)
            if not flying and not self.submitted:
                self.submitted = True
                if self._submit(client, work):
                    continue  # poll what was just submitted (a fast provider may be done)
            if not flying:
                break
            self.batches.pending = len(flying)
            if deadline is not None and time.monotonic() + pause > deadline:
                break
            self.sleep(jittered(pause))
            pause = min(pause * 2, self.api.max_poll_seconds)
        if not self.ledger.uncollected():
            self.batches.pending = 0

    def _collect(self, client: BatchClient, work: BatchWork) -> list[ProviderBatch]:
        """Each uncollected batch's status; a finished one's answers into the output. The
        batches in flight after that (resubmissions included)."""
        tracking = self.ledger.tracking
        for batch in self.ledger.uncollected():
            if batch.creating:
                batch = self._adopt(client, batch)
                if batch is None:
                    continue
            remote = self._retrieve(client, batch)
            if remote is None:
                continue
            status = remote.status
            if status not in FINAL_STATUSES:
                if status != batch.status:
                    tracking.update_provider_batch(batch.batch_id, status)
                continue
            if status == "failed":
                errors = list(remote.errors)
                if self._refused_requests(client, work, batch, errors):
                    continue
                said = "; ".join(e.said() for e in errors[:3]) or "no reason given"
                if len(errors) > 3:
                    said += f"; and {len(errors) - 3} more"
                tracking.collect_provider_batch(batch.batch_id, status, self.run_id, said)
                raise ProviderBatchError(f"provider batch {batch.batch_id} failed: {said}")
            unreadable: list[str] = []
            try:
                asked = self._asked(client, batch)
                results = client.results(remote, unreadable)
            except NotFound as gone:
                self._give_up(batch, f"{gone.what} is gone at the provider")
                continue
            note = None
            if status == "cancelled":
                note = "cancelled at the provider"
                self.batches.cancelled.append(batch.batch_id)
                self.submitted = True  # cancelled means stop: nothing more is sent this run
            if unreadable:
                self.batches.unreadable_lines += len(unreadable)
                note = "; ".join(
                    filter(None, (note, f"{len(unreadable)} unreadable lines: {unreadable[0]}"))
                )
            self._settle(client, work, batch, asked, results)
            tracking.collect_provider_batch(batch.batch_id, status, self.run_id, note)
            if batch.run_id != self.run_id:
                self.batches.collected_from(batch.run_id, batch.submitted_at)
        return self.ledger.uncollected()

    def _refused_requests(
        self, client: BatchClient, work: BatchWork, batch: ProviderBatch, errors: list
    ) -> bool:
        """A batch the provider's validation failed for some of its requests only (each error
        naming its line): those requests are their inputs' failures, and the rest are sent
        again at once, in a batch of their own, so one bad request never blocks the others.
        False where the errors name no line or every line, or the batch was itself such a
        resend (the file's or the settings' fault, such as a model the provider does not
        serve, whose errors a provider may list for a few lines only: the run fails)."""
        if batch.attempt != FIRST:
            return False
        lines = self.ledger.tracking.batch_request_lines(batch.file_sha256)
        refused: dict[str, str] = {}
        for error in errors:
            key = lines.get(error.line)
            if key is None:
                return False  # an error of the whole file, or a line unknown here
            refused.setdefault(key, f"refused by the provider: {error.said()}")
        if not refused or len(refused) >= len(lines):
            return False
        self.sent |= set(lines.values())
        done = work.output.done_keys
        fresh = {key for key in refused if key in work.keys and key not in done}
        work.take([BatchResult(key, None, None, error=refused[key]) for key in sorted(fresh)])
        rest = {key for key in lines.values() if key not in refused and key in work.keys}
        if rest - done:
            self._send(client, work, rest - done, RESUBMITTED)
        first = next(iter(refused.values()))
        note = f"{len(refused)} of {len(lines)} requests refused: {first}"
        self.ledger.tracking.collect_provider_batch(batch.batch_id, "failed", self.run_id, note)
        self.batches.refused_requests += len(refused)
        self.batches.collected.append(batch.batch_id)
        return True

    def _retrieve(self, client: BatchClient, batch: ProviderBatch) -> RemoteBatch | None:
        """The provider's view of the batch; None, and the batch given up, where the
        provider has no such batch."""
        try:
            return client.retrieve(batch.batch_id)
        except NotFound:
            self._give_up(batch, "the provider has no such batch (404)")
            return None

    def _give_up(self, batch: ProviderBatch, why: str) -> None:
        """A batch the provider no longer has (deleted, past its file retention, another
        `api_base`): recorded as given up, shown by `batches`, and its requests, which no
        checkpoint holds, sent again by this run. One sent to another `api_base` may still
        run, and bill, there: the note says where, and how to cancel it."""
        if batch.api_base and batch.api_base != self.api.shown_base:
            why += (
                f"; it was sent to {batch.api_base}, where it may still run and bill: cancel "
                f"it there (batches drop {batch.batch_id} --yes --api-base <that address>)"
            )
            self.batches.elsewhere.append(batch.batch_id)
        self.ledger.tracking.collect_provider_batch(batch.batch_id, GIVEN_UP, self.run_id, why)
        self.batches.given_up.append(batch.batch_id)

    def _adopt(self, client: BatchClient, intent: ProviderBatch) -> ProviderBatch | None:
        """A batch recorded before its creation, which never answered (an error, or a run cut
        off): the provider's batch made of it (`find_created`), adopted; None, and the intent
        forgotten (its requests are sent again), where the provider has none."""
        tracking = self.ledger.tracking
        found = client.find_created(self.ledger, intent)
        if found is None:
            tracking.forget_batch_intent(intent.batch_id)
            return None
        tracking.batch_created(intent.batch_id, found.id, found.status)
        self.batches.adopted.append(found.id)
        return tracking.provider_batch(found.id)

    def _settle(
        self,
        client: BatchClient,
        work: BatchWork,
        batch: ProviderBatch,
        asked: set[str],
        results: dict[str, BatchResult],
    ) -> None:
        """A finished batch's answers to the family (`take`); its retryable failures sent
        again once, in a batch of their own."""
        self.sent |= asked
        done = work.output.done_keys
        fresh = [r for k, r in results.items() if k in work.keys and k not in done and k in asked]
        again = {r.key for r in fresh if r.error is not None and r.retryable}
        if batch.attempt == FIRST and again and not self.batches.cancelled:
            self._send(client, work, again, RESUBMITTED)  # sent twice, no answer: planned again
        self.batches.collected.append(batch.batch_id)
        work.take([r for r in fresh if r.error is None or not r.retryable])

    def _submit(self, client: BatchClient, work: BatchWork) -> bool:
        """The plan's inputs no checkpoint holds and this run has not sent, as new batches."""
        with tempfile.TemporaryDirectory(prefix="openai-batch-") as folder:
            todo = work.requests(work.output.done_keys | self.sent)
            files = write_batch_files(todo, Path(folder))
            for path in files:
                self._upload_and_create(client, work, path, FIRST)
        return bool(files)

    def _send(self, client: BatchClient, work: BatchWork, keys: set[str], attempt: int) -> None:
        """The plan's request lines of `keys` as one new batch (made again from the plan: the
        provider's copy of the input file is not read)."""
        with tempfile.TemporaryDirectory(prefix="openai-batch-") as folder:
            path = Path(folder) / "requests-resubmitted.jsonl"
            with path.open("w", encoding="utf-8") as out:
                for request in work.requests(set()):
                    if request["custom_id"] in keys:
                        out.write(json.dumps(request) + "\n")
            self._upload_and_create(client, work, path, attempt)

    def _upload_and_create(
        self, client: BatchClient, work: BatchWork, path: Path, attempt: int
    ) -> None:
        """Upload the file, record the batch's intent (its file's hash and request ids), then
        create it once: with no retry by the client, since a retried creation that the
        provider had accepted is a second batch, billed twice. A creation that answers an
        error is looked for at the provider (`find_created`) before the error stands."""
        digest, ids = file_digest(path)
        file_id = client.upload(path)
        intent = self.ledger.intend(
            self.run_id, file_id, digest, ids, attempt, self.api.shown_base, client.wire
        )
        crash_point("intended", len(self.batches.submitted) + 1)
        metadata = {
            "generation": self.ledger.generation[:512],
            "partition": self.ledger.partition[:512],
            "run_id": self.run_id[:512],
            FILE_HASH: digest,
        }
        try:
            created = client.create(
                path, file_id, work.endpoint, self.api.completion_window, metadata
            )
        except Exception:
            recorded = self.ledger.tracking.provider_batch(intent)
            adopted = None if recorded is None else self._adopt(client, recorded)
            if adopted is None:
                raise  # nothing was created: the intent is forgotten, the requests unsent
            batch_id = adopted.batch_id
        else:
            batch_id = created.id
            self.ledger.tracking.batch_created(intent, batch_id, created.status)
        self.batches.submitted.append(batch_id)
        crash_point("submitted", len(self.batches.submitted))

    # --------------------------------------------------------------- the files

    def _asked(self, client: BatchClient, batch: ProviderBatch) -> set[str]:
        """The batch's request ids: recorded when it was submitted; for a batch recorded
        before they were, read back from the provider (`request_ids`)."""
        recorded = self.ledger.tracking.batch_request_ids(batch.file_sha256)
        return recorded if recorded is not None else client.request_ids(batch)


def planned_token_counts(planned: StagePath | Path) -> dict[str, int]:
    """Each planned input's tokens, as the plan counted them (by `input_hash`): what a run
    counts for an answer whose usage says nothing."""
    counts: dict[str, int] = {}
    for batch in read_batches(planned, ["input_hash", "token_count"], batch_rows=65536):
        counts.update(
            zip(batch["input_hash"].to_pylist(), batch["token_count"].to_pylist(), strict=True)
        )
    return counts


def run_of(out: StagePath | Path) -> str:
    """The run an execute output belongs to: its stage folder's name (`stage_file`)."""
    return PurePosixPath(getattr(out, "path", str(out))).parent.name


def jittered(seconds: float) -> float:
    """A wait with up to a tenth added, so that many partitions do not poll in step."""
    return seconds * (1 + random.random() / 10)
