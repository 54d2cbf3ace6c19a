"""Product kinds declared in the configuration (`products:`), beyond the built-in three.

    products:
      lengths:                                   # the kind's name, as its declaration says
        declaration: my_products.lengths.kind:LENGTHS   # module:attribute of a ProductKind
        buckets: [200, 1000, 5000]               # the rest is the kind's own section

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
# what a kind's declaration must hold to be one (`batch_pipeline.declaration.ProductKind`)
KIND_ATTRIBUTES = ("name", "package", "section", "targets", "open", "partition", "executor")


@dataclass(frozen=True)
class DeclaredProduct:
    """A product kind the configuration declares: where, the kind, and its section."""

    declaration: str  # module:attribute
    kind: Any  # a batch_pipeline.declaration.ProductKind (config sits below it)
    section: BaseModel

    def dump(self) -> dict[str, object]:
        return {DECLARATION: self.declaration, **self.section.model_dump(mode="json")}


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
        if not isinstance(entry, dict) or DECLARATION not in entry:
            raise ValueError(f"{name}: needs `{DECLARATION}: module:attribute` of a ProductKind")
        settings = {k: v for k, v in entry.items() if k != DECLARATION}
        kind = _kind_at(entry[DECLARATION], str(name))
        try:
            section = kind.section.model_validate(settings, context=info.context)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join([str(name), *(str(p) for p in e['loc'])])}: "
                f"{e['msg'].removeprefix('Value error, ')}"
                for e in error.errors()
            )
            raise ValueError(problems) from None
        declared[name] = DeclaredProduct(entry[DECLARATION], kind, section)
    return declared
