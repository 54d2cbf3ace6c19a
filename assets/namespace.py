"""A component's namespace: the key prefix its `translation` gives, which its asset keys and
the names of its ops, jobs, sensors, schedules and pipeline resource all carry, so that two
instances of `BatchPipelineComponent` in one project (two files, even with a collection of the
same name in each) never collide. The empty namespace is the one this repository's sample
uses: every name as it is."""

import re
from collections.abc import Iterable
from dataclasses import dataclass

import dagster as dg

from resources.pipeline import PipelineResource

# Dagster's own rule for the names of ops, jobs, sensors, schedules and resource keys, which
# a prefix becomes part of
NAME = re.compile(r"^[A-Za-z0-9_]+$")
PIPELINE_RESOURCE = "pipeline"


@dataclass(frozen=True)
class Namespace:
    """The prefix of a component's asset keys (`translation.key_prefix`), and the names the
    rest of its definitions take from it: `<prefix>__<name>`, as Dagster names an asset's op
    (`docs/configuration.md`, "Two instances in one project")."""

    prefix: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for part in self.prefix:
            if not NAME.match(part):
                raise ValueError(
                    f"key prefix {part!r} is not a Dagster name: letters, digits and "
                    "underscores only (it names the component's jobs, sensors and resources)"
                )

    def name(self, base: str) -> str:
        """A job's, sensor's, schedule's, op's or resource key's name in this namespace."""
        return "__".join((*self.prefix, base))

    def key(self, name: str) -> dg.AssetKey:
        return dg.AssetKey([*self.prefix, name])

    def keys(self, names: Iterable[str]) -> list[dg.AssetKey]:
        return [self.key(name) for name in names]

    @property
    def pipeline_key(self) -> str:
        """The key of this namespace's `pipeline` resource (where its state lives)."""
        return self.name(PIPELINE_RESOURCE)

    def resource_keys(self, keys: Iterable[str]) -> set[str]:
        """Resource `keys` as this namespace names them: its own pipeline resource, and the
        shared ones (inference, generation, scoring, s3) as they are."""
        return {self.pipeline_key if k == PIPELINE_RESOURCE else k for k in keys}


SAMPLE = Namespace()  # no prefix: every name as it is (this repository's code location)


def pipeline_of(context: dg.AssetExecutionContext | dg.SensorEvaluationContext) -> PipelineResource:
    """The pipeline resource an asset or sensor asked for, whichever namespace's key names it:
    a step or tick holds exactly one."""
    held = context.resources._asdict()
    found = [r for r in held.values() if isinstance(r, PipelineResource)]
    if len(found) != 1:
        raise dg.DagsterInvariantViolationError(
            f"expected one pipeline resource, found {len(found)} among {sorted(held)}"
        )
    return found[0]
