"""The document briefs' configuration: a prompt file with a shared system part and a document
part, and an output schema whose properties become typed columns; a bad one fails at load
and names the field and the problem, and each has a version that changes with its meaning."""

import json
import shutil
from pathlib import Path

import pytest

from batch_pipeline.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "data" / "brief_schema.json").read_text())


def workspace(tmp_path, prompt=None, schema=None, extra=""):
    (tmp_path / "docs").mkdir(parents=True, exist_ok=True)
    if prompt is None:
        shutil.copy(REPO / "data" / "brief_prompt.yaml", tmp_path / "prompt.yaml")
    else:
        (tmp_path / "prompt.yaml").write_text(prompt)
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA if schema is None else schema))
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        "collections:\n  - name: kb\n    source: {kind: filesystem, path: docs}\n"
        f"    briefs: {{prompt: prompt.yaml, output_schema: schema.json{extra}}}\n"
    )
    return config


def briefs_of(config_path):
    return load_config(config_path).collections[0].briefs


def test_the_sample_prompt_and_schema_load_with_their_columns(tmp_path):
    from batch_pipeline.config.output_schema import load_output_schema
    from batch_pipeline.config.prompt import load_prompt

    briefs = briefs_of(workspace(tmp_path))
    assert briefs.document_tokens == 768 and briefs.max_tokens == 512
    prompt = load_prompt(briefs.prompt, ("title", "text", "doc_id"))
    assert prompt.system.startswith("You write briefs")
    assert prompt.render(title="Resetting", text="Body.", doc_id="a.md").startswith(
        "Article: Resetting"
    )
    schema = load_output_schema(briefs.output_schema)
    assert schema.columns == {
        "summary": "string",
        "audience": "string",
        "questions": "list<string>",
    }
    assert schema.enums == {"audience": ["owner", "admin", "member", "guest"]}


def test_a_prompt_edit_is_a_new_version_and_a_reformatted_schema_is_not(tmp_path):
    from batch_pipeline.config.output_schema import load_output_schema
    from batch_pipeline.config.prompt import load_prompt

    first = workspace(tmp_path / "a")
    second = workspace(tmp_path / "b", prompt="system: Be brief.\ndocument: $text\n")
    version = [load_prompt(briefs_of(c).prompt, ("title", "text")).version for c in (first, second)]
    assert version[0] != version[1]
    path = briefs_of(first).output_schema
    before = load_output_schema(path).version
    path.write_text(json.dumps(SCHEMA, indent=4))
    assert load_output_schema(path).version == before
    path.write_text(json.dumps({**SCHEMA, "required": ["summary"]}))
    assert load_output_schema(path).version != before


@pytest.mark.parametrize(
    ("prompt", "schema", "says"),
    [
        (
            "system: Hi\ndocument: $text by $author\n",
            None,
            "prompt: prompt.yaml: `document` uses $author",
        ),
        ("system: Hi $title\ndocument: $text\n", None, "`system` is shared by every input"),
        ("system: Hi\ndocument: costs $ 5\n", None, "write $$ for a dollar sign"),
        ("system: Hi\n", None, "`document` must be a non-empty text"),
        ("system: Hi\ndocument: $text\nexamples: []\n", None, "unknown key 'examples'"),
        (
            None,
            {"type": "object", "properties": {"n": {"type": "nope"}}},
            "not a valid JSON schema",
        ),
        (
            None,
            {"type": "object", "properties": {"who": {"type": "object"}}},
            "property 'who' has type 'object'",
        ),
        (None, {"type": "object", "properties": {"doc_id": {"type": "string"}}}, "every row has"),
        (None, {"type": "array"}, "must describe one object"),
        (
            None,
            {
                "type": "object",
                "properties": {"tags": {"type": "array", "items": {"type": "integer"}}},
            },
            "an array's items must be strings",
        ),
        # what vLLM's structured outputs (xgrammar) would refuse once the engine had started
        (
            None,
            {
                "type": "object",
                "properties": {
                    "questions": {
                        "type": "array",
                        "items": {"type": "string", "pattern": "^How .*\\?$", "maxLength": 90},
                    }
                },
            },
            "property 'questions': its items: `pattern` with `maxLength` is not enforced",
        ),
        (
            None,
            {
                "type": "object",
                "properties": {
                    "summary": {
                        "type": "string",
                        "pattern": "^.*$",
                        "minLength": 5,
                        "maxLength": 90,
                    }
                },
            },
            "property 'summary': `pattern` with `minLength` and `maxLength` is not enforced",
        ),
        (
            None,
            {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
                },
            },
            "property 'tags': `uniqueItems` on an array is not enforced",
        ),
        (
            None,
            {"type": "object", "properties": {"phone": {"type": "string", "format": "phone"}}},
            "property 'phone': format 'phone' is not enforced",
        ),
        (
            None,
            {"type": "object", "properties": {"score": {"type": "number", "multipleOf": 0.5}}},
            "property 'score': `multipleOf` is not enforced",
        ),
        (
            None,
            {
                "type": "object",
                "properties": {"summary": {"type": "string"}},
                "patternProperties": {"^x-": {"type": "string"}},
            },
            "schema.json: `patternProperties` beside `properties` is not enforced",
        ),
        (
            None,
            {
                "type": "object",
                "properties": {
                    "summary": {"type": "string", "allOf": [{"minLength": 3}, {"maxLength": 9}]}
                },
            },
            "property 'summary': `allOf` of more than one schema is not enforced",
        ),
    ],
)
def test_a_bad_prompt_or_schema_fails_at_load_naming_the_field(tmp_path, prompt, schema, says):
    with pytest.raises(ConfigError) as raised:
        load_config(workspace(tmp_path, prompt=prompt, schema=schema))
    message = str(raised.value)
    assert "collections[0].briefs" in message and says in message


def test_a_missing_prompt_file_and_a_too_small_budget_are_named(tmp_path):
    with pytest.raises(ConfigError, match=r"collections\[0\]\.briefs\.document_tokens"):
        load_config(workspace(tmp_path, extra=", document_tokens: 4"))
    config = workspace(tmp_path)
    (tmp_path / "prompt.yaml").unlink()
    with pytest.raises(ConfigError, match=r"collections\[0\]\.briefs\.prompt.*file not found"):
        load_config(config)


def test_a_sharded_collection_with_briefs_loads_with_a_partition_per_shard(tmp_path):
    config = workspace(tmp_path)
    config.write_text(config.read_text().replace("    briefs:", "    shards: 2\n    briefs:"))
    collection = load_config(config).collections[0]
    assert collection.briefs is not None
    assert collection.partition_keys() == ["kb-s00", "kb-s01"]


def test_a_collection_named_like_another_s_briefs_is_refused_at_load(tmp_path):
    config = workspace(tmp_path)
    config.write_text(
        config.read_text() + "  - name: kb_briefs\n    source: {kind: filesystem, path: docs}\n"
    )
    said = r"collections, collections\[\]\.briefs: 'kb_briefs' would name a product of kind index"
    with pytest.raises(ConfigError, match=said):
        load_config(config)


SECRET = "root:$6$s3cr3tH4sh:19000:0:99999:7:::"


@pytest.mark.parametrize(
    ("file", "text", "says"),
    [
        ("schema.json", "true", "schema.json must describe one object with `properties`"),
        (
            "schema.json",
            '{"type": "object", "properties": {"a": ' * 500 + "{}" + "}}" * 500,
            "schema.json is not UTF-8 JSON: nested",
        ),
        ("prompt.yaml", "system: " + "[" * 20000 + "]" * 20000, "nested too deeply to read"),
        ("prompt.yaml", "system: " + "[" * 100 + "]" * 100, "nested more than 64 levels deep"),
        ("prompt.yaml", SECRET + "\n", "is it a prompt file?"),
        ("prompt.yaml", f"system: [{SECRET}\n", "not valid YAML"),
        ("schema.json", SECRET, "not valid JSON: Expecting value at line 1, column 1"),
    ],
    ids=["true", "500-deep", "20000-deep", "100-deep", "shadow", "shadow-broken", "shadow-json"],
)
def test_a_hostile_file_is_refused_in_one_line_that_quotes_none_of_it(tmp_path, file, text, says):
    """A schema `true`, files nested deeper than the parser (or any real file) goes, and a
    path pointing at a file of secrets each fail at load in one line naming the field, and
    the message quotes nothing of the file (they gave tracebacks, or printed its line)."""
    config = workspace(tmp_path)
    (tmp_path / file).write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(config)
    message = str(raised.value)
    assert "collections[0].briefs" in message and says in message, message
    assert "s3cr3t" not in message and len(message.splitlines()) <= 2


def test_a_pipeline_file_nested_too_deeply_is_one_line(tmp_path):
    config = tmp_path / "pipeline.yaml"
    config.write_text("collections: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply to read as YAML"):
        load_config(config)
    config.write_text("collections:\n  - name: kb\n    source: {kind: " + SECRET + "\n")
    with pytest.raises(ConfigError, match="not valid YAML") as raised:
        load_config(config)
    assert "s3cr3t" not in str(raised.value)


def test_a_schema_with_a_reference_loop_fails_at_load_naming_it(tmp_path):
    """A `$ref` loop passed load, and then the engine refused it for every document, each
    recorded as its own invalid output and never retried: now the load refuses it."""
    looped = {
        **SCHEMA,
        "$defs": {"node": {"type": "string", "$ref": "#/$defs/node"}},
        "properties": {
            **SCHEMA["properties"],
            "summary": {"type": "string", "$ref": "#/$defs/node"},
        },
    }
    with pytest.raises(
        ConfigError, match=r"a reference \(\$ref at #/properties/summary\) is not taken"
    ):
        briefs_of(workspace(tmp_path, schema=looped))
