"""A fifth built-in kind: one folder inside the package and one line in the registry.

The test product's folder (`tests/lengths/`) is copied into the package as
`batch_pipeline.lengths` (a folder named for its kind, as `tests/unit/test_layout.py` holds
every committed kind to, `tests/lengths/` among them) and its declaration added to
`batch_pipeline.products.KINDS`, the one registry line; nothing else is edited. The
configuration gives its section under `products: lengths:` with no `declaration:` (a
built-in kind's name is enough), and `run --kind`, `status`, `doctor`, `report`, the nightly
reconciliation and the publish sensors reach it, as they reach the index, the briefs and
the ticket intents.
"""

import importlib
import json
import sys
from pathlib import Path

import dagster as dg
import pytest

import batch_pipeline
from batch_pipeline import products
from batch_pipeline.cli import main
from batch_pipeline.config import ConfigError, load_config
from batch_pipeline.definitions import build_definitions
from tests.engine.test_fourth_product import write_workspace

PACKAGE = "batch_pipeline.lengths"
FOLDER = Path(__file__).resolve().parents[1] / "lengths"
PRODUCT = "handbook_lengths"


@pytest.fixture
def fifth_kind(tmp_path, monkeypatch):  # noqa: ANN201
    """The test product as a built-in kind: its folder in the package, its line in KINDS."""
    folder = tmp_path / "package" / "lengths"
    folder.mkdir(parents=True)
    for path in FOLDER.glob("*.py"):
        text = path.read_text(encoding="utf-8").replace("tests.lengths", PACKAGE)
        (folder / path.name).write_text(text, encoding="utf-8")
    monkeypatch.setattr(batch_pipeline, "__path__", [*batch_pipeline.__path__, str(folder.parent)])
    kind = importlib.import_module(f"{PACKAGE}.kind").LENGTHS
    monkeypatch.setattr(products, "KINDS", (*products.KINDS, kind))  # the registry line
    yield kind
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]


def workspace(root: Path) -> Path:
    """The fourth product's workspace, its section given with no declaration."""
    config = write_workspace(root)
    text = config.read_text()
    config.write_text(text.replace("    declaration: tests.lengths.kind:LENGTHS\n", ""))
    return config


def cli(capsys, root: Path, *args: str) -> tuple[int, str]:  # noqa: ANN001
    code = main(["--config", str(root / "pipeline.yaml"), "--home", str(root / "home"), *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_commands_reach_the_fifth_built_in_kind(fifth_kind, tmp_path, capsys):
    config = load_config(workspace(tmp_path))
    kinds = products.kinds_for(config)
    assert [k.name for k in kinds] == ["index", "briefs", "related", "tickets", "lengths"]
    assert kinds[-1] is fifth_kind and fifth_kind.package == PACKAGE
    assert config.declared_kinds() == []  # built in: configured, not declared

    code, out = cli(
        capsys, tmp_path, "run", "--kind", "lengths", "--collection", "handbook", "--json"
    )
    ran = json.JSONDecoder().raw_decode(out[out.index("{") :])[0]
    assert code == 0 and ran["product"] == PRODUCT
    assert ran["land"]["documents_landed"] == 3 and ran["generation"]["decision"] == "promoted"
    code, out = cli(capsys, tmp_path, "status")
    assert f"{PRODUCT} (document lengths of handbook): 3 of 3 documents bucketed" in out
    code, out = cli(capsys, tmp_path, "doctor", "--product", PRODUCT)
    assert code == 0 and f"{PRODUCT}: healthy; 3 of 3 bucketed" in out
    code, out = cli(capsys, tmp_path, "report", "--product", PRODUCT, "--json")
    assert code == 0 and json.loads(out)["runs"][0]["partition"] == "handbook"

    code, out = cli(capsys, tmp_path, "run", "--kind", "nosuch", "--collection", "handbook")
    assert code == 2 and out.count("\n") == 1 and "unknown kind 'nosuch'" in out


def test_the_nightly_job_and_the_publish_sensor_reach_it(fifth_kind, tmp_path):
    defs = build_definitions(workspace(tmp_path))
    job = defs.resolve_job_def("embedding_job")
    selected = {key.to_user_string() for key in job.asset_layer.selected_asset_keys}
    assert {"source_documents", "length_inputs", "document_lengths"} <= selected
    assert defs.resolve_schedule_def("nightly_reconciliation").job_name == job.name
    assert defs.resolve_sensor_def("handbook_publish_sensor").job_name == job.name
    land = defs.get_assets_def("document_lengths")
    assert land.group_names_by_key[dg.AssetKey("document_lengths")] == "document_lengths"


def test_a_section_for_no_built_in_kind_or_one_configured_elsewhere_fails_at_load(tmp_path):
    text = workspace(tmp_path).read_text()  # without the fixture: no kind called lengths
    with pytest.raises(ConfigError, match=r"products: lengths: needs `declaration: .*no built-in"):
        load_config(tmp_path / "pipeline.yaml")
    (tmp_path / "pipeline.yaml").write_text(
        text.replace("  lengths:\n", "  tickets:\n").split("    collections:")[0] + "    {}\n"
    )
    with pytest.raises(ConfigError, match=r"products: tickets: .* is configured by `tickets`"):
        load_config(tmp_path / "pipeline.yaml")
