"""Product kinds declared in the configuration (`products:`), and the sections of built-in
kinds configured there.

    products:
      lengths:                                   # the kind's name, as its declaration says
        declaration: my_products.lengths.kind:LENGTHS   # module:attribute of a ProductKind
        buckets: [200, 1000, 5000]               # the rest is the kind's own section

An entry without `declaration:` configures the built-in kind of that name (one listed in the
registry, `batch_pipeline.products.KINDS`, whose section is not elsewhere: the vector index
is configured by `collections:`, the briefs by a collection's `briefs:`, the ticket intents
by `tickets:`). Either way one rule checks the section: the kind's own model.

The declaration is imported when the configuration loads, and the rest of the entry is
validated by the kind's own section model (`ProductKind.section`), so a bad key fails at load
and names its field (`products: lengths.buckets: ...`). `batch_pipeline.products` adds the
kinds to its registry: every command, the code location and `run --kind` then cover them.
"""

import importlib
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError, ValidationInfo

DECLARATION = "declaration"
# the registry of built-in kinds, as module:attribute: read when a configuration is
# validated (the registry sits above the configuration, so it is not imported here)
BUILT_IN_KINDS = "batch_pipeline.products:KINDS"
# what a kind's declaration must hold to be one (`batch_pipeline.declaration.ProductKind`)
KIND_ATTRIBUTES = ("name", "package", "section", "targets", "open", "partition", "executor")


@dataclass(frozen=True)
class DeclaredProduct:
    """A product kind the configuration declares: where, the kind, and its section."""

    declaration: str | None  # module:attribute; None: the built-in kind of its name
    kind: Any  # a batch_pipeline.declaration.ProductKind (config sits below it)
    section: BaseModel

    def dump(self) -> dict[str, object]:
        section = self.section.model_dump(mode="json")
        return section if self.declaration is None else {DECLARATION: self.declaration, **section}


def _kind_at(declaration: object, name: str) -> Any:
    """The ProductKind that `declaration` (module:attribute) names, or a ValueError saying why
    not."""
    if not isinstance(declaration, str) or declaration.count(":") != 1:
        raise ValueError(f"{name}.{DECLARATION}: give module:attribute of a ProductKind")
    module, attribute = declaration.split(":")
    try:
        kind = getattr(importlib.import_module(module), attribute)
    except ImportError as error:
        raise ValueError(f"{name}.{DECLARATION}: cannot import {module!r} ({error})") from None
    except AttributeError:
        raise ValueError(f"{name}.{DECLARATION}: {module!r} has no {attribute!r}") from None
    missing = [a for a in KIND_ATTRIBUTES if not hasattr(kind, a)]
    if missing:
        raise ValueError(
            f"{name}.{DECLARATION}: {declaration} is not a ProductKind (it has no "
            f"{', '.join(missing)})"
        )
    if kind.name != name:
        raise ValueError(f"{name}: {declaration} declares the kind {kind.name!r}, not {name!r}")
    return kind


def built_in_kinds() -> tuple[Any, ...]:
    """The registry's built-in kinds (`BUILT_IN_KINDS`)."""
    module, attribute = BUILT_IN_KINDS.split(":")
    return tuple(getattr(importlib.import_module(module), attribute))


def section_of(kind: Any) -> str:
    """Where a kind's section sits in the YAML (`collections`, `tickets`, `products.NAME`)."""
    return kind.configured_at or f"products.{kind.name}"


def one_name_per_product(config: Any) -> None:
    """The one rule over every kind's products (the built-in kinds' and those `products:`
    declares): no declared kind takes a built-in kind's name, and no two products share a
    name, which keys their generations. A ValueError naming the sections otherwise."""
    taken = {kind.name for kind in built_in_kinds()}
    for kind in config.declared_kinds():
        if kind.name in taken:
            raise ValueError(f"products.{kind.name}: {kind.name!r} is a built-in kind's name")
    seen: dict[str, Any] = {}
    for kind in config.kinds():
        for target in kind.targets(config):
            other = seen.setdefault(target.name, kind)
            if other is not kind:
                raise ValueError(
                    f"{section_of(other)}, {section_of(kind)}: {target.name!r} would name a "
                    f"product of kind {other.name} and one of kind {kind.name}; each product "
                    "needs its own (its generations are kept under it)"
                )


def _built_in(name: str) -> Any:
    """The built-in kind called `name` configured under `products:`, or a ValueError saying
    where its section goes instead."""
    kinds = {kind.name: kind for kind in built_in_kinds()}
    kind = kinds.get(name)
    if kind is None:
        raise ValueError(
            f"{name}: needs `{DECLARATION}: module:attribute` of a ProductKind (no built-in "
            f"kind is called {name!r}; built-in: {', '.join(kinds)})"
        )
    if kind.configured_at is not None:
        raise ValueError(
            f"{name}: the built-in kind {name!r} is configured by `{kind.configured_at}`"
        )
    return kind


def declared_products(value: object, info: ValidationInfo) -> dict[str, DeclaredProduct]:
    """`products:` validated: each entry's declaration imported, its section checked by the
    kind's own model (relative paths resolve against the config file's folder)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("a mapping of kind name to {declaration: module:attribute, ...}")
    declared: dict[str, DeclaredProduct] = {}
    for name, entry in value.items():
        if isinstance(entry, DeclaredProduct):  # an already validated configuration
            declared[name] = entry
            continue
        if not isinstance(entry, dict):
            raise ValueError(f"{name}: a mapping ({{{DECLARATION}: module:attribute, ...}})")
        settings = {k: v for k, v in entry.items() if k != DECLARATION}
        if DECLARATION in entry:
            kind = _kind_at(entry[DECLARATION], str(name))
        else:
            kind = _built_in(str(name))
        try:
            section = kind.section.model_validate(settings, context=info.context)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join([str(name), *(str(p) for p in e['loc'])])}: "
                f"{e['msg'].removeprefix('Value error, ')}"
                for e in error.errors()
            )
            raise ValueError(problems) from None
        declared[name] = DeclaredProduct(entry.get(DECLARATION), kind, section)
    return declared
