"""After landing: the generation's evaluation, its promotion decision, and the drift check."""

import dagster as dg

from assets.partitions import OWNERS
from batch_pipeline.drift import drift_report
from resources.inference import InferenceResource
from resources.pipeline import PipelineResource

GENERATIONS_GROUP = "index_generations"
DRIFT = "embedding_drift"


def build_index_generation(partitions: dg.PartitionsDefinition) -> dg.AssetsDefinition:
    @dg.asset(
        name="index_generation",
        deps=["vector_index"],
        partitions_def=partitions,
        group_name=GENERATIONS_GROUP,
        owners=OWNERS,
        kinds={"python", "lancedb"},
        check_specs=[dg.AssetCheckSpec(DRIFT, asset="index_generation")],
    )
    def index_generation(
        context: dg.AssetExecutionContext,
        pipeline: PipelineResource,
        inference: InferenceResource,
    ) -> dg.MaterializeResult:
        """The collection's model generation built by this configuration: its completeness,
        its recall@k and MRR@k on the collection's evaluation set against the live generation,
        and the promotion decision with its reason. Promotion is one atomic switch of the live
        pointer; readers keep using the old generation until then."""
        engine = pipeline.collection(context.partition_key)
        review = engine.review_generation(inference.runner)
        record = engine.generation()
        live = engine.generations.live(engine.name)
        scores = review["scores"]
        metadata = {
            "generation": engine.index,
            "fingerprint": engine.fingerprint,
            "state": record["state"],
            "complete": bool(record["complete"]),
            "documents": record["documents"],
            "rows": record["rows"],
            "decision": review["decision"],
            "reason": review["reason"],
            "live_generation": live["index_name"] if live else None,
            **{f"candidate_{k}": v for k, v in scores.get("candidate", {}).items()},
            **{f"live_{k}": v for k, v in scores.get("live", {}).items()},
        }
        if "WARNING" in str(review["reason"]):
            context.log.warning(str(review["reason"]))
        settings = pipeline.config.generations
        drift = drift_report(
            engine.store,
            engine.index,
            inference.runner(engine.model),
            settings.drift_sample,
            settings.drift_min_cosine,
        )
        return dg.MaterializeResult(
            metadata=metadata,
            check_results=[
                dg.AssetCheckResult(
                    check_name=DRIFT,
                    passed=bool(drift["passed"]),
                    metadata={k: v for k, v in drift.items() if k != "passed"},
                )
            ],
        )

    return index_generation
