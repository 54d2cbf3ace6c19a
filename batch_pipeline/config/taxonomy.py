"""The intent taxonomy: a YAML file of intents, each with a description and example utterances.

```yaml
intents:
  refund_request:
    description: The customer asks for their money back.
    examples: [Can I get a refund for last month?]
```

Its version is a hash of the file's bytes: any edit is a new version, and so a new generation.
"""

import hashlib
import re
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import yaml

from batch_pipeline.config.files import FileFormatError, read_yaml

UNKNOWN = "unknown"  # what a ticket is when no intent is clear enough; never an intent's name
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
MAX_TAXONOMY_BYTES = 4 * 1024 * 1024  # thousands of intents with examples fit far below this


class TaxonomyError(ValueError):
    """A taxonomy file that cannot be used; the message names the intent and the problem."""


class _TaxonomyLoader(yaml.SafeLoader):
    """YAML as a taxonomy is written: no aliases (an alias bomb expands a few lines into
    gigabytes), and no key twice in a mapping (the last one would silently win)."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise TaxonomyError(
                f"line {event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are not "
                "accepted in a taxonomy; write the text out"
            )
        return super().compose_node(parent, index)

    def construct_mapping(self, node, deep=False):  # noqa: ANN001, ANN201
        lines: dict[object, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, Hashable) and key in lines:
                raise TaxonomyError(f"{key!r} appears twice, on lines {lines[key]} and {line}")
            lines[key] = line
        return super().construct_mapping(node, deep)


@dataclass(frozen=True)
class Intent:
    name: str
    description: str
    examples: tuple[str, ...]


@dataclass(frozen=True)
class Taxonomy:
    intents: tuple[Intent, ...]
    version: str  # sha256 of the file's bytes, 12 hex digits

    @property
    def names(self) -> list[str]:
        return [intent.name for intent in self.intents]


def parse_taxonomy(text: str, source: str = "taxonomy") -> Taxonomy:
    if len(text.encode("utf-8")) > MAX_TAXONOMY_BYTES:
        raise TaxonomyError(f"{source}: over {MAX_TAXONOMY_BYTES // 2**20} MiB; not a taxonomy")
    try:
        data = read_yaml(text, _TaxonomyLoader)
    except (TaxonomyError, FileFormatError) as error:
        raise TaxonomyError(f"{source}: {error}") from None
    intents = data.get("intents") if isinstance(data, dict) else None
    if not isinstance(intents, dict) or len(intents) < 2:
        raise TaxonomyError(f"{source}: expected `intents:`, a mapping of at least two intents")
    parsed = []
    for name, spec in intents.items():
        where = f"{source}: intents.{name}"
        if not isinstance(name, str) or not _NAME.match(name) or name == UNKNOWN:
            raise TaxonomyError(
                f"{where}: an intent name is a lowercase letter then a-z, 0-9 or _, "
                f"and not {UNKNOWN!r}"
            )
        description = spec.get("description") if isinstance(spec, dict) else None
        if not isinstance(description, str) or not description.strip():
            raise TaxonomyError(f"{where}: needs a description (text)")
        examples = spec.get("examples") or []
        if not isinstance(examples, list) or not all(
            isinstance(e, str) and e.strip() for e in examples
        ):
            raise TaxonomyError(f"{where}.examples: must be a list of non-empty strings")
        parsed.append(Intent(name, description.strip(), tuple(e.strip() for e in examples)))
    version = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    return Taxonomy(tuple(parsed), version)


def load_taxonomy(path: Path) -> Taxonomy:
    try:
        if Path(path).stat().st_size > MAX_TAXONOMY_BYTES:
            raise TaxonomyError(f"{path}: over {MAX_TAXONOMY_BYTES // 2**20} MiB; not a taxonomy")
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise TaxonomyError(f"{path}: cannot be read: {error}") from None
    return parse_taxonomy(text, str(path))
