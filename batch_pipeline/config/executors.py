"""The executors a section may name, read from their registry when the section is validated.

The registry (`batch_pipeline.executors.registry`) sits above the configuration, so it is
looked up by name at validation, as `products:` looks up the kinds' registry (`declared`):
a section that names an executor (the ticket cascade's `executor`) takes any the registry
lists for its family, and asks what the executor declares it can do rather than its name.
"""

import importlib
from typing import Any

REGISTRY = "batch_pipeline.executors.registry"


def _registry() -> Any:
    return importlib.import_module(REGISTRY)


def known_executor(family: str, name: str) -> str:
    """`name`, if `family` has an executor so called; a ValueError naming them otherwise."""
    problem = _registry().unknown_executor(family, name)
    if problem is not None:
        raise ValueError(problem)
    return name


def provider_batch_executors(family: str) -> list[str]:
    """`family`'s executors that submit to a provider's Batch API (and so take its
    settings)."""
    return _registry().executors_with("provider_batches", family)
