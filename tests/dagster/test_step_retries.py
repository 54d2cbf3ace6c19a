"""A step's retry policy is for transient failures (`assets/partitions.py`,
`@retried_if_transient`), run here with the real policy and the real executor:

- Terminate stops a run: a step interrupted is not retried and the in-process executor runs
  nothing after it. Without the guard Dagster turns the interrupt into a retry
  (dagster-io/dagster#15026): a terminated briefs run here restarted its step, ran the rest
  and ended in success.
- A failure that would fail the same way again (a bug, a missing table) fails the step once;
  before, a bug was tried four times, 5 to 40 s apart.
- A transient failure (a dropped connection) is retried.
"""

import errno
from pathlib import Path

import dagster as dg
import pytest

from assets.partitions import TRANSIENT_RETRY, retried_if_transient
from batch_pipeline.definitions import build_definitions
from batch_pipeline.sources.base import SourceUnavailableError

REPO = Path(__file__).resolve().parents[2]


def materialized(assets: list) -> tuple[dg.ExecuteInProcessResult, list]:
    with dg.instance_for_test() as instance:
        result = dg.materialize(assets, instance=instance, raise_on_error=False)
        events = instance.all_logs(result.run_id)
    return result, [e.dagster_event for e in events if e.dagster_event]


def test_an_interrupted_step_is_not_retried_and_nothing_runs_after_it():
    ran = []

    @dg.asset(retry_policy=TRANSIENT_RETRY)
    @retried_if_transient
    def interrupted(context: dg.AssetExecutionContext) -> None:
        """Interrupted as Dagster interrupts a step when its run is terminated."""
        ran.append(("interrupted", context.retry_number))
        raise dg.DagsterExecutionInterruptedError("terminated")

    @dg.asset
    def zz_independent() -> None:  # after the interrupted step in the executor's order
        """Depends on nothing; would run if the executor went on."""
        ran.append(("independent", 0))

    result, events = materialized([interrupted, zz_independent])
    assert not result.success
    assert ran == [("interrupted", 0)]  # one attempt, and the executor stopped
    kinds = {e.event_type for e in events}
    assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in kinds
    assert dg.DagsterEventType.STEP_FAILURE in kinds


@pytest.mark.parametrize(
    "error",
    [
        KeyError("title"),  # a bug: the same way every time
        SourceUnavailableError("source.table: table 'articles' does not exist"),
    ],
    ids=lambda error: type(error).__name__,
)
def test_a_failure_that_would_fail_again_fails_the_step_once(error):
    attempts = []

    @dg.asset(retry_policy=TRANSIENT_RETRY)
    @retried_if_transient
    def failing(context: dg.AssetExecutionContext) -> None:
        """Fails with an error that is not worth trying again."""
        attempts.append(context.retry_number)
        raise error

    result, events = materialized([failing])
    assert not result.success
    assert attempts == [0]
    assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in {e.event_type for e in events}
    failure = next(e for e in events if e.event_type == dg.DagsterEventType.STEP_FAILURE)
    said = failure.step_failure_data.error
    assert "Not retried: this is not a transient failure" in said.message
    cause = said.cause  # the error itself, traceback and all
    assert cause.cls_name == type(error).__name__
    assert str(error) in cause.message


def test_a_transient_failure_is_retried():
    attempts = []

    @dg.asset(retry_policy=TRANSIENT_RETRY)
    @retried_if_transient
    def flaky(context: dg.AssetExecutionContext) -> None:
        """Its connection drops on the first try, as a network's does."""
        attempts.append(context.retry_number)
        if context.retry_number == 0:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")

    result, events = materialized([flaky])  # the policy's first delay: 5 s, with jitter
    assert result.success
    assert attempts == [0, 1]
    assert dg.DagsterEventType.STEP_UP_FOR_RETRY in {e.event_type for e in events}


def test_every_asset_with_a_retry_policy_is_retried_if_transient_only():
    defs = build_definitions(REPO / "pipeline.yaml")  # the sample: every product
    retried = [
        a
        for a in defs.resolve_asset_graph().assets_defs
        if a.is_executable and a.op.retry_policy is not None
    ]
    assert len(retried) >= 8
    for assets_def in retried:
        compute = assets_def.op.compute_fn.decorated_fn
        assert getattr(compute, "retried_if_transient", False), assets_def.key
