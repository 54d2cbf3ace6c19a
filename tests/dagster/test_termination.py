"""Terminate stops a run: a step with the transient retry policy, interrupted, is not retried
and the in-process executor runs nothing after it. Without the guard Dagster turns the
interrupt into a retry (dagster-io/dagster#15026): a terminated briefs run here restarted its
step, ran the rest and ended in success."""

from pathlib import Path

import dagster as dg

from assets.partitions import TRANSIENT_RETRY, stops_when_terminated
from batch_pipeline.definitions import build_definitions

REPO = Path(__file__).resolve().parents[2]


def test_an_interrupted_step_is_not_retried_and_nothing_runs_after_it():
    ran = []

    @dg.asset(retry_policy=TRANSIENT_RETRY)
    @stops_when_terminated
    def interrupted(context: dg.AssetExecutionContext) -> None:
        """Interrupted as Dagster interrupts a step when its run is terminated."""
        ran.append(("interrupted", context.retry_number))
        raise dg.DagsterExecutionInterruptedError("terminated")

    @dg.asset
    def zz_independent() -> None:  # after the interrupted step in the executor's order
        """Depends on nothing; would run if the executor went on."""
        ran.append(("independent", 0))

    with dg.instance_for_test() as instance:
        result = dg.materialize(
            [interrupted, zz_independent], instance=instance, raise_on_error=False
        )
        events = instance.all_logs(result.run_id)
    assert not result.success
    assert ran == [("interrupted", 0)]  # one attempt, and the executor stopped
    kinds = {e.dagster_event.event_type for e in events if e.dagster_event}
    assert dg.DagsterEventType.STEP_UP_FOR_RETRY not in kinds
    assert dg.DagsterEventType.STEP_FAILURE in kinds


def test_every_asset_with_a_retry_policy_stops_when_terminated():
    defs = build_definitions(REPO / "pipeline.yaml")  # the sample: every product
    retried = [
        a
        for a in defs.resolve_asset_graph().assets_defs
        if a.is_executable and a.op.retry_policy is not None
    ]
    assert len(retried) >= 8
    for assets_def in retried:
        compute = assets_def.op.compute_fn.decorated_fn
        assert getattr(compute, "stops_when_terminated", False), assets_def.key
