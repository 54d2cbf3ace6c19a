"""Configuration: validation errors name the field, paths resolve, names are safe."""

from pathlib import Path

import pytest

from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.state.storage import resolve_storage


def write(tmp_path, text):
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def test_relative_source_path_resolves_against_the_config_folder(tmp_path):
    (tmp_path / "docs").mkdir()
    config = load_config(
        write(tmp_path, "collections:\n  - name: kb\n    source: {kind: filesystem, path: docs}\n")
    )
    assert config.collections[0].source.path == (tmp_path / "docs").resolve()
    assert config.collections[0].source.glob == "**/*.md"
    assert config.model.name == "all-MiniLM-L6-v2"


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        (
            "collections:\n  - name: kb\n    source: {kind: filesystem}\n",
            "collections[0].source.path",
            "Field required",
        ),
        (
            "collections:\n  - name: kb\n    source: {kind: filesystem, path: d}\n"
            "    chunking: {max_tokens: -3}\n",
            "collections[0].chunking.max_tokens",
            "greater than 16",
        ),
        (
            "collections:\n  - name: kb\n    source: {kind: filesystem, path: d}\n"
            "    chunking: {max_tokens: 128, overlap_tokens: 100}\n",
            "collections[0].chunking",
            "overlap_tokens must be less than half",
        ),
        (
            "collections:\n  - name: kb\n    source: {kind: ftp, path: d}\n",
            "collections[0].source",
            "kind",
        ),
        (
            "model: {nmae: x}\ncollections:\n  - name: kb\n    source: {path: d}\n",
            "model.nmae",
            "Extra inputs are not permitted",
        ),
        ("collections: []\n", "collections", "at least 1"),
        (
            "maintenance: {staging_runs_kept: 0}\n"
            "collections:\n  - name: kb\n    source: {kind: filesystem, path: d}\n",
            "maintenance.staging_runs_kept",
            "greater than or equal to 1",
        ),
    ],
)
def test_a_bad_value_names_its_field(tmp_path, text, field, reason):
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, text))
    message = str(error.value)
    assert f"  {field}:" in message
    assert reason in message


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ("    related: {k: true}\n", "collections[0].related: k"),
        ("    chunking: {max_tokens: true}\n", "collections[0].chunking: max_tokens"),
        ("    evaluation: {path: eval.jsonl, tolerance: false}\n", "evaluation: tolerance"),
    ],
)
def test_a_boolean_is_no_number(tmp_path, section, field):
    """`k: true` loaded as `k: 1` (pydantic's lax bool-to-int): refused, naming the field."""
    (tmp_path / "d").mkdir()
    (tmp_path / "eval.jsonl").write_text('{"query": "q", "relevant": ["a.md"]}\n')
    text = f"collections:\n  - name: kb\n    source: {{kind: filesystem, path: d}}\n{section}"
    with pytest.raises(ConfigError) as error:
        load_config(write(tmp_path, text))
    assert field in str(error.value) and "is a boolean; give a number" in str(error.value)
    sensor = "sensor: {interval_seconds: true}\n"
    with pytest.raises(ConfigError, match="sensor: interval_seconds: true is a boolean"):
        load_config(write(tmp_path, text.replace(section, "") + sensor))


@pytest.mark.parametrize("name", ["Hand Book", "../etc", "kb'; drop", "x" * 64, "1kb", ""])
def test_unsafe_collection_names_are_rejected(tmp_path, name):
    text = f"collections:\n  - name: {name!r}\n    source: {{kind: filesystem, path: d}}\n"
    with pytest.raises(ConfigError, match=r"collections\[0\]\.name: .*not a safe collection name"):
        load_config(write(tmp_path, text))


def test_duplicate_collection_names_are_rejected(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    text = (
        "collections:\n"
        "  - {name: kb, source: {kind: filesystem, path: a}}\n"
        "  - {name: kb, source: {kind: filesystem, path: b}}\n"
    )
    with pytest.raises(ConfigError, match="used twice"):
        load_config(write(tmp_path, text))


def test_missing_and_malformed_files_say_so(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "collections: [\n"))


def test_the_shipped_config_is_valid():
    config = load_config()
    assert config.partition_keys() == ["handbook"]
    assert config.collections[0].source.path.is_dir()


def test_a_product_inside_a_collection_says_what_to_add_and_an_unknown_collection_whats_there():
    config = load_config()  # the shipped handbook has briefs and related documents
    assert config.collection_section("handbook", "briefs", "briefs").prompt.name
    plain = config.model_copy(
        update={"collections": [config.collections[0].model_copy(update={"briefs": None})]}
    )
    with pytest.raises(ConfigError) as missing:
        plain.collection_section("handbook", "briefs", "briefs", " (prompt, output_schema)")
    assert str(missing.value) == (
        "collection 'handbook' has no briefs: add collections[handbook].briefs "
        "(prompt, output_schema)"
    )
    with pytest.raises(ConfigError, match=r"^unknown collection 'nope'; configured: handbook$"):
        config.configured("nope")


def test_storage_defaults_and_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("BATCH_PIPELINE_LANCEDB_URI", raising=False)
    monkeypatch.delenv("BATCH_PIPELINE_TRACKING_URL", raising=False)
    storage = resolve_storage(str(tmp_path))
    assert storage.lancedb_uri == str(tmp_path / "lancedb")
    assert storage.tracking_url == f"sqlite:///{tmp_path / 'tracking.db'}"
    monkeypatch.setenv("BATCH_PIPELINE_LANCEDB_URI", "s3://bucket/index")
    monkeypatch.setenv("BATCH_PIPELINE_TRACKING_URL", "postgresql+psycopg://127.0.0.1/test")
    storage = resolve_storage(str(tmp_path))
    assert storage.lancedb_uri == "s3://bucket/index"
    assert storage.tracking_url.startswith("postgresql+psycopg://")


def test_storage_options_come_from_json_and_a_bad_value_names_the_variable(tmp_path, monkeypatch):
    options = '{"aws_endpoint": "http://127.0.0.1:9", "allow_http": true}'
    monkeypatch.setenv("BATCH_PIPELINE_STORAGE_OPTIONS", options)
    monkeypatch.setenv("BATCH_PIPELINE_STAGING_DIR", "s3://bucket/staging")
    storage = resolve_storage(str(tmp_path))
    assert storage.storage_options == {"aws_endpoint": "http://127.0.0.1:9", "allow_http": "true"}
    assert storage.staging_dir == "s3://bucket/staging"
    assert "127.0.0.1:9" not in repr(storage)  # options hold credentials: never shown
    monkeypatch.setenv("BATCH_PIPELINE_STORAGE_OPTIONS", "{not json")
    with pytest.raises(ConfigError, match="BATCH_PIPELINE_STORAGE_OPTIONS: not valid JSON"):
        resolve_storage(str(tmp_path))
    monkeypatch.setenv("BATCH_PIPELINE_STORAGE_OPTIONS", '["a"]')
    with pytest.raises(ConfigError, match="BATCH_PIPELINE_STORAGE_OPTIONS: must be a JSON object"):
        resolve_storage(str(tmp_path))


def test_redaction_masks_secret_settings_and_url_passwords_but_not_token_counts():
    from batch_pipeline.config import parse_config, redacted

    config = parse_config(
        {
            "collections": [
                {
                    "name": "cms",
                    "source": {"kind": "sql", "url": "postgresql://u:hunter2@db/x", "table": "t"},
                    "chunking": {"max_tokens": 200, "overlap_tokens": 20},
                }
            ]
        },
        base_dir=".",
    )
    shown = redacted(config.collections[0])
    assert shown["chunking"]["max_tokens"] == 200  # was "***": "token" matched as a substring
    assert shown["chunking"]["overlap_tokens"] == 20
    assert shown["source"]["url"] == "postgresql://u:***@db/x"
    options = {"aws_secret_access_key": "s", "Password": "p", "aws_region": "eu", "tokens": 3}
    assert redacted(options) == {
        "aws_secret_access_key": "***",
        "Password": "***",
        "aws_region": "eu",
        "tokens": 3,
    }


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:hunter2@db/x", "postgresql://u:***@db/x"),
        ("postgresql://u@db/x?password=hunter2", "postgresql://u@db/x?password=***"),
        (
            "postgresql://u@db/x?sslmode=require&sslpassword=hunter2&application_name=bp",
            "postgresql://u@db/x?sslmode=require&sslpassword=***&application_name=bp",
        ),
        ("https://h/k?X-Amz-Signature=hunter2&x=1", "https://h/k?X-Amz-Signature=***&x=1"),
        ("https://h/k?access_token=hunter2", "https://h/k?access_token=***"),
        ("sqlite:///state/tracking.db", "sqlite:///state/tracking.db"),
    ],
)
def test_every_credential_a_url_can_carry_is_masked(url, shown):
    from batch_pipeline.config import masked_url, redacted

    assert masked_url(url) == shown
    assert redacted({"source": {"url": url}}) == {"source": {"url": shown}}


RELATIVE = "(relative paths resolve against the config file's folder)"


def test_every_path_is_checked_when_the_config_loads_and_names_its_field(tmp_path):
    """A copy of pipeline.yaml in another folder fails at load, not after an embedding run."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "eval.jsonl").write_text("")
    (tmp_path / "a-file").write_text("")
    good = (
        "collections:\n  - name: kb\n    source: {kind: filesystem, path: docs}\n"
        "    evaluation: {path: eval.jsonl}\n"
    )
    load_config(write(tmp_path, good))
    cases = [
        (good.replace("path: docs", "path: gone"), "source.path", "folder not found", "gone"),
        (good.replace("path: docs", "path: a-file"), "source.path", "not a folder", "a-file"),
        (good.replace("eval.jsonl", "x/eval.jsonl"), "evaluation.path", "file not found", "x"),
        (good.replace("eval.jsonl", "docs"), "evaluation.path", "not a file", "docs"),
        ("model: {path: models/mini}\n" + good, "model.path", "folder not found", "models"),
    ]
    for text, field, problem, name in cases:
        with pytest.raises(ConfigError) as raised:
            load_config(write(tmp_path, text))
        prefix = "" if field.startswith("model") else "collections[0]."
        where = (tmp_path / name).resolve()
        expected = f"{prefix}{field}: {problem}: {where}"
        assert expected in str(raised.value) and RELATIVE in str(raised.value), str(raised.value)


def test_reserved_metadata_names_are_exactly_the_tables_own_columns():
    from batch_pipeline.config import RESERVED_COLUMNS
    from batch_pipeline.state.vector_store import chunk_schema

    assert set(chunk_schema(4).names) == RESERVED_COLUMNS


@pytest.mark.parametrize(
    "endpoint",
    [
        "http://AKIAKEY:s3cr3t@127.0.0.1:9000",
        "http://minio@127.0.0.1:9000",
        "https://s3.example.com/?X-Amz-Signature=s3cr3t&X-Amz-Credential=AKIAKEY",
    ],
)
@pytest.mark.parametrize("section", ["collection", "tickets"])
def test_credentials_in_an_s3_endpoint_are_refused_at_load_without_quoting_them(
    tmp_path, endpoint, section
):
    """run, status and doctor printed an endpoint_url with a user part or a signed query
    whole; such an endpoint now fails at load, naming the field and not the URL."""
    s3 = f"{{kind: s3, bucket: kb-bucket, endpoint_url: '{endpoint}'}}"
    text = "collections:\n  - name: kb\n    source: " + (
        s3 if section == "collection" else "{kind: filesystem, path: .}"
    )
    if section == "tickets":
        (tmp_path / "taxonomy.yaml").write_text(
            (Path(__file__).resolve().parents[2] / "data" / "intent_taxonomy.yaml").read_text()
        )
        text += f"\ntickets:\n  source: {s3}\n  taxonomy: taxonomy.yaml"
    with pytest.raises(ConfigError) as raised:
        load_config(write(tmp_path, text + "\n"))
    message = str(raised.value)
    field = "collections[0].source.endpoint_url" if section == "collection" else "tickets.source"
    assert field in message and "holds credentials" in message, message
    assert "s3cr3t" not in message and "AKIAKEY" not in message


@pytest.mark.parametrize(
    ("model", "evaluation", "says"),
    [
        ("{min_cosine: 0.95}", True, "min_cosine applies to precision fixed_accuracy"),
        ("{precision: int4}", True, "model.precision"),
        ("{precision: fixed_accuracy, min_cosine: 1.5}", True, "model.min_cosine"),
        ("{precision: fixed_accuracy}", False, "collections[0].evaluation: model.precision "),
    ],
)
def test_a_precision_the_engine_cannot_hold_is_refused_at_load(tmp_path, model, evaluation, says):
    (tmp_path / "d").mkdir()
    (tmp_path / "eval.jsonl").write_text('{"query": "q", "relevant": ["a.md"]}\n')
    text = "collections:\n  - name: kb\n    source: {kind: filesystem, path: d}\n"
    if evaluation:
        text += "    evaluation: {path: eval.jsonl}\n"
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        load_config(write(tmp_path, text + f"model: {model}\n"))


def test_fixed_accuracy_is_in_the_fingerprint_and_faithful_keeps_the_old_one(tmp_path):
    from batch_pipeline.config import ModelConfig
    from batch_pipeline.inference.fingerprint import fingerprint_of
    from batch_pipeline.inference.models import resolve_model

    faithful = resolve_model(ModelConfig())
    fixed = resolve_model(ModelConfig(precision="fixed_accuracy"))
    looser = resolve_model(ModelConfig(precision="fixed_accuracy", min_cosine=0.98))
    assert "precision" not in faithful.identity()  # fingerprints from before precision stand
    prints = {fingerprint_of(m.identity()) for m in (faithful, fixed, looser)}
    assert len(prints) == 3
