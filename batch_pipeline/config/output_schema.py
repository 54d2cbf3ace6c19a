"""An output schema: the JSON schema a chat model's output is constrained to, and the typed
columns its fields land in.

The file is a JSON schema of one object. Each property becomes a column, so each must have a
type a column can hold:

| property | column |
|---|---|
| `{"type": "string"}` (with `maxLength`, `enum`, ...) or `{"enum": [...]}` of strings | string |
| `{"type": "integer"}` | int64 |
| `{"type": "number"}` | float64 |
| `{"type": "boolean"}` | bool |
| `{"type": "array", "items": {"type": "string"}}` | list of strings |

Its version is a hash of the schema's canonical JSON, so reformatting the file is no change.

A constraint the structured-output engine cannot enforce fails at load, naming the property
(vLLM's xgrammar backend refuses the whole request otherwise, after the engine has started):
a `pattern` or `format` with `minLength` or `maxLength` (bound the length in the pattern:
`{5,120}`), a `format` it does not know, `uniqueItems` or `contains` on an array,
`multipleOf` on a number, an `allOf` of several schemas, and `propertyNames` or
`patternProperties`. `tests/system/test_chat_engine.py` checks that vLLM's own test agrees.
"""

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import jsonschema

from batch_pipeline.config.files import FileFormatError, read_json

COLUMN_TYPES = ("string", "int64", "float64", "bool", "list<string>")
# the string formats xgrammar enforces (vLLM's `STRING_SUPPORTED_FORMATS`)
ENFORCED_FORMATS = frozenset(
    {
        "email",
        "date",
        "time",
        "date-time",
        "duration",
        "ipv4",
        "ipv6",
        "hostname",
        "uuid",
        "uri",
        "uri-reference",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
    }
)
MAX_SCHEMA_BYTES = 256 * 1024


class OutputSchemaError(ValueError):
    """A schema file that cannot be used; the message names the property and the problem."""


@dataclass(frozen=True)
class OutputSchema:
    path: Path
    schema: dict
    columns: dict[str, str]  # property -> column type, in the schema's order
    version: str

    @property
    def enums(self) -> dict[str, list[str]]:
        """The properties whose values are one of a list, with the list."""
        properties = self.schema["properties"]
        return {name: list(p["enum"]) for name, p in properties.items() if "enum" in p}


def _column_type(name: str, prop: object) -> str:
    if not isinstance(prop, dict):
        raise OutputSchemaError(f"property {name!r} must be a schema object")
    if "enum" in prop:
        if not prop["enum"] or not all(isinstance(v, str) for v in prop["enum"]):
            raise OutputSchemaError(f"property {name!r}: `enum` must list strings")
        return "string"
    kind = prop.get("type")
    simple = {"string": "string", "integer": "int64", "number": "float64", "boolean": "bool"}
    if kind in simple:
        return simple[kind]
    if kind == "array":
        items = prop.get("items")
        if isinstance(items, dict) and (items.get("type") == "string" or "enum" in items):
            return "list<string>"
        raise OutputSchemaError(f"property {name!r}: an array's items must be strings")
    raise OutputSchemaError(
        f"property {name!r} has type {kind!r}; a column holds string, integer, number, "
        "boolean or an array of strings"
    )


def _unenforced(prop: dict) -> str | None:
    """What in one schema (the whole object, a property or an array's items) the
    structured-output engine cannot enforce, as the reason a load gives; None: it can
    enforce all of it."""
    kinds = prop.get("type")
    kinds = {kinds} if isinstance(kinds, str) else set(kinds or ())
    if isinstance(prop.get("allOf"), list) and len(prop["allOf"]) > 1:
        return "`allOf` of more than one schema is not enforced by the structured-output engine"
    if "object" in kinds:
        for key in ("propertyNames", "patternProperties"):
            if key in prop:
                return (
                    f"`{key}` beside `properties` is not enforced by the structured-output "
                    "engine (xgrammar)"
                )
    if kinds & {"integer", "number"} and "multipleOf" in prop:
        return "`multipleOf` is not enforced by the structured-output engine (xgrammar)"
    if "array" in kinds:
        for key in ("uniqueItems", "contains", "minContains", "maxContains"):
            if key in prop:
                return f"`{key}` on an array is not enforced by the structured-output engine"
        items = prop.get("items")
        reason = _unenforced(items) if isinstance(items, dict) else None
        return f"its items: {reason}" if reason else None
    if "string" in kinds:
        if "format" in prop and prop["format"] not in ENFORCED_FORMATS:
            return (
                f"format {prop['format']!r} is not enforced by the structured-output engine "
                f"(it knows {', '.join(sorted(ENFORCED_FORMATS))})"
            )
        bounded = [key for key in ("minLength", "maxLength") if key in prop]
        shaped = [key for key in ("pattern", "format") if key in prop]
        if bounded and shaped:
            shapes = " and ".join(f"`{key}`" for key in shaped)
            lengths = " and ".join(f"`{key}`" for key in bounded)
            return (
                f"{shapes} with {lengths} is not enforced by the structured-output "
                f"engine (xgrammar): drop {'them' if len(bounded) > 1 else 'it'} and bound "
                'the length in the pattern, as in "^.{5,120}$"'
            )
    return None


REFERENCES = ("$ref", "$dynamicRef", "$recursiveRef")


def _reference(value: object, at: str = "#") -> str | None:
    """Where the schema uses a reference (`$ref` and its kin), as a JSON pointer; None when
    it uses none."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key in REFERENCES:
                return f"{key} at {at}"
            found = _reference(inner, f"{at}/{key}")
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found = _reference(inner, f"{at}/{index}")
            if found is not None:
                return found
    return None


def load_output_schema(path: Path, reserved: frozenset[str] = frozenset()) -> OutputSchema:
    """Read and check a schema file; an `OutputSchemaError` names what is wrong. Properties
    may not take a `reserved` name (a column every row has)."""
    data = path.read_bytes()
    if len(data) > MAX_SCHEMA_BYTES:
        raise OutputSchemaError(f"{path.name} is {len(data):,} bytes; at most {MAX_SCHEMA_BYTES:,}")
    try:
        schema = read_json(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise OutputSchemaError(f"{path.name} is not UTF-8 JSON: not UTF-8 text") from None
    except FileFormatError as error:
        raise OutputSchemaError(f"{path.name} is not UTF-8 JSON: {error}") from None
    if not isinstance(schema, dict):
        raise OutputSchemaError(f"{path.name} must describe one object with `properties`")
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.exceptions.SchemaError as error:
        raise OutputSchemaError(
            f"{path.name} is not a valid JSON schema: {error.message}"
        ) from None
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), dict):
        raise OutputSchemaError(f"{path.name} must describe one object with `properties`")
    if not schema["properties"]:
        raise OutputSchemaError(f"{path.name} has no properties")
    where = _reference(schema)
    if where is not None:
        raise OutputSchemaError(
            f"{path.name}: a reference ({where}) is not taken: the schema must spell out every "
            "property (a reference loop is refused by the engine for every document)"
        )
    reason = _unenforced(schema)
    if reason:
        raise OutputSchemaError(f"{path.name}: {reason}")
    columns = {}
    for name, prop in schema["properties"].items():
        if name in reserved:
            raise OutputSchemaError(f"property {name!r} is a column every row has; rename it")
        columns[name] = _column_type(name, prop)
        reason = _unenforced(prop)
        if reason:
            raise OutputSchemaError(f"property {name!r}: {reason}")
    canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return OutputSchema(
        path=path,
        schema=schema,
        columns=columns,
        version=hashlib.sha256(canonical.encode()).hexdigest()[:16],
    )
