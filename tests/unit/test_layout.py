"""The architecture, checked: every import points down the layers, the engine needs no
Dagster, and each stage and kind of state has a folder of its own."""

import ast
import functools
from pathlib import Path

import pytest

from batch_pipeline.executors.registry import EXECUTORS
from batch_pipeline.products import KINDS
from batch_pipeline.runs.partition import ProductPartition
from tests.lengths.kind import LENGTHS

# every kind this repository commits: the built-in ones, and the declared test product
# (`tests/lengths/`), which the checks below hold to the same layout as a fifth kind
COMMITTED = (*KINDS, LENGTHS)

REPO = Path(__file__).resolve().parents[2]

# Lowest first. A module may import its own layer and those below it, never one above.
LAYERS: list[tuple[str, ...]] = [
    (
        "batch_pipeline.names",
        "batch_pipeline.arguments",
        "batch_pipeline.iterables",
        "batch_pipeline.faults",
        "batch_pipeline.transient",
    ),
    ("batch_pipeline.config",),  # the YAML and the files it names (the ticket taxonomy)
    ("batch_pipeline.text", "batch_pipeline.inference", "batch_pipeline.sources"),
    ("batch_pipeline.measures", "batch_pipeline.reports"),  # reports: their text layout
    ("batch_pipeline.state",),
    ("batch_pipeline.stages",),
    ("batch_pipeline.executors",),  # what runs a plan: embedding, generation
    # the generation review, and completeness and freshness: they read the state only
    ("batch_pipeline.generations", "batch_pipeline.health"),
    # the run frame every product runs in, and what a product declares to be one
    ("batch_pipeline.runs", "batch_pipeline.declaration"),
    # the products, side by side: each on the frame, neither on the other (the registry's)
    tuple(kind.package for kind in COMMITTED),
    ("batch_pipeline.triggers",),
    ("batch_pipeline.products",),  # the registry of product kinds
    (
        "batch_pipeline.cli",
        "batch_pipeline.bench",
        "batch_pipeline.partitions",
    ),
    ("resources",),
    ("assets",),
    ("sensors",),
    ("batch_pipeline.definitions",),
    ("batch_pipeline.components",),  # the component types, over the definitions
]
PRODUCTS = tuple(kind.package for kind in COMMITTED)
PROJECT = ("batch_pipeline", "assets", "resources", "sensors")
SCANNED = (*PROJECT, LENGTHS.package)  # the folders whose modules are checked


def layer_of(module: str) -> int | None:
    if module == "batch_pipeline":  # the package itself: only sets offline defaults
        return 0
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for number, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            matches = module == prefix or module.startswith(prefix + ".")
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), number)
    return None if best is None else best[1]


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in SCANNED:
        for path in (REPO / package.replace(".", "/")).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


MODULES = project_modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_sits_in_a_layer(module):
    assert layer_of(module) is not None, f"{module}: add it to a layer in LAYERS"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    own = layer_of(module)
    upward = []
    for imported in imports_of(MODULES[module]):
        if imported not in MODULES:
            continue  # a third-party module, or a name imported from a project module
        target = layer_of(imported)
        if target is not None and own is not None and target > own:
            upward.append(f"{imported} (layer {target})")
    assert not upward, f"{module} (layer {own}) imports from above: {upward}"


@pytest.mark.parametrize(
    "module",
    sorted(
        m for m in MODULES if m.startswith("batch_pipeline") and layer_of(m) < layer_of("resources")
    ),
)
def test_the_engine_imports_no_dagster(module):
    dagster = {i for i in imports_of(MODULES[module]) if i.split(".")[0].startswith("dagster")}
    assert not dagster, f"{module} imports {sorted(dagster)}"


def test_every_folder_stands_at_one_height():
    """Each folder's modules all sit in one layer: no folder holds both something the
    products build on and something built on them. (The engine's own top-level modules are
    its spine: each is a layer of its own.)"""
    heights: dict[str, set[int]] = {}
    for module in MODULES:
        package = module if (MODULES[module].name == "__init__.py") else module.rpartition(".")[0]
        if package != "batch_pipeline":
            heights.setdefault(package, set()).add(layer_of(module))
    split = {package: sorted(h) for package, h in heights.items() if len(h) > 1}
    assert not split, f"folders at more than one height: {split}"


def test_no_product_imports_another():
    """The products stand side by side on the run frame: neither is built on the other."""
    for module in MODULES:
        own = next((p for p in PRODUCTS if module == p or module.startswith(p + ".")), None)
        if own is None:
            continue
        others = [
            i
            for i in imports_of(MODULES[module])
            for p in PRODUCTS
            if p != own and (i == p or i.startswith(p + "."))
        ]
        assert not others, f"{module} imports another product: {others}"


# the names in `batch_pipeline.names` that one product's tables own: no other product builds
# them (a product reads another's output as a declared feed or input, resolved by the frame)
OWNED_NAMES = {
    "batch_pipeline.names.question_index": "batch_pipeline.briefs",
    "batch_pipeline.names.QUESTIONS_SUFFIX": "batch_pipeline.briefs",
    "batch_pipeline.names.briefs_product_name": "batch_pipeline.briefs",
    "batch_pipeline.names.BRIEFS_SUFFIX": "batch_pipeline.briefs",
}


def test_no_product_builds_another_s_table_names():
    for module in MODULES:
        own = next((p for p in PRODUCTS if module == p or module.startswith(p + ".")), None)
        if own is None:
            continue
        others = sorted(
            name for name in imports_of(MODULES[module]) if OWNED_NAMES.get(name, own) != own
        )
        assert not others, f"{module} builds another product's table names: {others}"


def test_no_product_builds_a_reviewer():
    """The frame builds the one reviewer from what a product says (`ReviewedGenerations`)."""
    folders = [REPO / p.replace(".", "/") for p in PRODUCTS]
    for path in (path for folder in folders for path in folder.rglob("*.py")):
        calls = [
            node
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "GenerationReviewer"
        ]
        assert not calls, f"{path.relative_to(REPO)} builds a GenerationReviewer"


# the modules that serve every product: they reach one through the registry
# (`batch_pipeline.products`), never by name
GENERIC = (
    "resources",
    "sensors",
    "batch_pipeline.definitions",  # the package itself: it merges the products' definitions
    "batch_pipeline.components",
    "batch_pipeline.components.pipeline_file",
    "batch_pipeline.components.scaffolder",
    "batch_pipeline.cli",
    "batch_pipeline.cli.run",
    "batch_pipeline.cli.context",
    "batch_pipeline.cli.executors",
)


@functools.cache
def names_a_product(module: str) -> bool:
    """A product's own module, or a Dagster module of one product (its assets or its
    definitions, which import it)."""
    if any(module == p or module.startswith(p + ".") for p in PRODUCTS):
        return True
    face = module.startswith(("assets.", "batch_pipeline.definitions."))
    return face and module in MODULES and any(map(names_a_product, imports_of(MODULES[module])))


@pytest.mark.parametrize(
    "module",
    sorted(m for m in MODULES if m in GENERIC or m.startswith(("resources.", "sensors."))),
)
def test_no_generic_module_names_a_product(module):
    named = sorted(i for i in imports_of(MODULES[module]) if names_a_product(i))
    assert not named, f"{module} names a product: {named}"


def test_the_generic_check_catches_a_named_product():
    assert names_a_product("batch_pipeline.index.search")
    assert names_a_product("assets.ticket_intents")
    assert names_a_product("batch_pipeline.definitions.document_briefs")
    assert not names_a_product("assets.product_stages")
    assert not names_a_product("batch_pipeline.products")


def test_the_height_check_catches_a_split_folder():
    """The checker itself: a folder with a module below the products and one above them."""
    assert layer_of("batch_pipeline.health.freshness") < layer_of("batch_pipeline.index")
    assert layer_of("batch_pipeline.products") > layer_of("batch_pipeline.index")
    assert layer_of("batch_pipeline.health.status") == layer_of("batch_pipeline.health")


def test_each_stage_kind_of_state_and_product_has_a_folder():
    """The shared stages (collect, plan, execute) in `stages/`; each product's own prepare and
    land in its own folder."""
    from batch_pipeline.stages import COLLECT, EXECUTE, LAND, PLAN, PREPARE

    engine = REPO / "batch_pipeline"
    folders = ("stages", "executors", "text", "inference", "sources", "state", "generations")
    for folder in (*folders, "health", "reports", "cli", "config"):
        assert (engine / folder / "__init__.py").is_file(), folder
    for stage in (COLLECT, PLAN, EXECUTE):
        assert (engine / "stages" / f"{stage.name}.py").is_file(), stage.name
    for product in PRODUCTS:
        folder = REPO / product.replace(".", "/")
        for stage in (PREPARE, LAND):
            assert (folder / f"{stage.name}.py").is_file(), f"{product}: {stage.name}"


def test_the_layer_check_catches_an_upward_import(tmp_path):
    """The checker itself: a state module importing a stage is flagged."""
    bad = tmp_path / "bad.py"
    bad.write_text("from batch_pipeline.stages.collect import NEW\n")
    own, target = layer_of("batch_pipeline.state.bad"), layer_of("batch_pipeline.stages.collect")
    assert "batch_pipeline.stages.collect" in imports_of(bad)
    assert target > own


@pytest.mark.parametrize("kind", COMMITTED, ids=lambda kind: kind.name)
def test_each_kind_is_declared_in_its_own_folder(kind):
    """A product is one declared object: its partition, rule, scorer, report and own prepare
    and land live in its own folder (named for it), its executor is one of the frame's or,
    with no model, its own, and its Dagster definitions resolve or are built from its
    stages. The built-in kinds' sections are the configuration's; a declared kind's is in
    its folder."""
    import importlib

    assert kind.package.rpartition(".")[2] == kind.name
    assert (REPO / kind.package.replace(".", "/") / "kind.py").is_file()
    for part in (kind.partition, kind.rule, kind.scorer):
        assert part.__module__.startswith(kind.package + "."), part
    for stage in ("prepare_stage", "land"):  # what the frame leaves to the product
        assert getattr(kind.partition, stage).__module__.startswith(kind.package + "."), stage
    # product and partition apart: a partition is its product's, which owns the generation
    assert issubclass(kind.partition, ProductPartition), kind.partition
    assert kind.report.startswith(kind.package + ".")
    # a kind of a model family runs the registry's executors of that family, by name; a
    # kind that runs no model, its own
    if kind.family is None:
        assert kind.executor.__module__.startswith(kind.package + ".")
    else:
        assert kind.family in EXECUTORS and kind.executor is None
    if kind.definitions is None:  # built from its declared stages (`declared_assets`)
        assert len(kind.stages) == 5 and kind.collection_runs
    else:
        module, _, function = kind.definitions.partition(":")
        assert callable(getattr(importlib.import_module(module), function))
    home = "batch_pipeline.config" if kind in KINDS else kind.package + "."
    assert kind.section.__module__.startswith(home)
    if kind.commands is not None:  # its own commands: added to the CLI and run by name
        commands = importlib.import_module(kind.commands)
        assert callable(commands.add_commands) and commands.COMMANDS


def test_the_fourth_product_touches_no_other_folder():
    """docs/layout.md's "Adding a product", held to: the test product `tests/lengths/` is
    built on the frame and the shared parts alone (no built-in product's folder, no command
    or registry module), and nothing outside its folder and its own tests names it."""
    folder = REPO / "tests" / "lengths"
    shared = ("batch_pipeline", "assets")
    for path in folder.glob("*.py"):
        for imported in imports_of(path):
            root = imported.split(".")[0]
            if root == "tests":
                assert imported.startswith("tests.lengths"), f"{path.name}: {imported}"
            elif root in shared:
                owner = next((p for p in PRODUCTS if imported.startswith(p)), None)
                assert owner is None, f"{path.name} imports a product: {imported}"
                assert not imported.startswith(("batch_pipeline.cli", "batch_pipeline.products"))
    its_tests = {  # and the policy tests, which run every kind a configuration can declare
        "test_fourth_product.py",
        "test_fourth_product_assets.py",
        "test_fifth_built_in_kind.py",
        "test_layout.py",
        "test_product_policies.py",
    }
    for path in (*REPO.glob("*/**/*.py"), *REPO.glob("*.yaml"), *REPO.glob("docs/*.md")):
        if folder in path.parents or path.name in its_tests or ".venv" in path.parts:
            continue
        assert "tests.lengths" not in path.read_text(encoding="utf-8"), path


MAX_MODULE_LINES = 500  # a module past this holds more than one idea: split it by idea


def test_no_engine_module_is_over_five_hundred_lines():
    over = {
        str(path.relative_to(REPO)): lines
        for path in sorted((REPO / "batch_pipeline").rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert over == {}
