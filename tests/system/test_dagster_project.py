"""batch-pipeline added to a new Dagster project, as its README says: `create-dagster
project`, `dg list components`, `dg scaffold defs` for a folder of pages, `dg check yaml`,
`dg check defs`, `dg launch` of the collection's partition, and then `batch-pipeline
search` answering from it; and the package as pip builds it from the checkout."""

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.support import BIN, REPO, write_corpus

TYPE = "batch_pipeline.BatchPipelineComponent"
SITE = "import sysconfig; print(sysconfig.get_paths()['purelib'])"


def run(args: list[str], cwd: Path, env: dict[str, str], timeout: int = 300):
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds from the checkout (what `pip install <checkout>` installs)."""
    folder = tmp_path_factory.mktemp("wheel")
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(folder),
            str(REPO),
        ],
        REPO,
        dict(os.environ),
    )
    (built,) = folder.glob("batch_pipeline-*.whl")
    return built


@pytest.fixture()
def project(tmp_path, wheel):
    """A new project, as `create-dagster project docs` writes it, with a virtual environment
    of its own (`.venv`) into which batch-pipeline is installed from the checkout's wheel, as
    a user's `pip install` puts it there; nothing of the checkout is on its path. Its
    dependencies (dagster, torch, ...) are this environment's, read through a .pth file,
    since nothing downloads here: what is checked is our package as installed, not pip's
    resolution of its pins."""
    run(
        [str(BIN / "create-dagster"), "project", "docs", "--no-uv-sync"], tmp_path, dict(os.environ)
    )
    root = tmp_path / "docs"
    venv = root / ".venv"
    run([sys.executable, "-m", "venv", str(venv)], root, dict(os.environ))
    python = venv / "bin" / "python"
    site = run([str(python), "-c", SITE], root, dict(os.environ)).stdout.strip()
    (Path(site) / "batch_pipeline_dependencies.pth").write_text(sysconfig.get_paths()["purelib"])
    run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        root,
        dict(os.environ),
    )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("BATCH_PIPELINE_", "DAGSTER_HOME", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env |= {
        # as `source .venv/bin/activate` sets them
        "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "VIRTUAL_ENV": str(venv),
        "PYTHONPATH": str(root / "src"),  # what installing the project itself would add
        "HF_HUB_OFFLINE": "1",
        "NO_COLOR": "1",
        "COLUMNS": "250",
    }
    imported = run(
        [str(python), "-c", "import batch_pipeline; print(batch_pipeline.__file__)"], root, env
    ).stdout
    assert imported.startswith(str(venv)), imported  # the installed package, not the checkout
    return root, env


def dg(*args: str) -> list[str]:
    """`dg ...` under the project's own Python (dg is one of the dependencies the .pth lends)."""
    return ["python", str(BIN / "dg"), *args]


def test_a_new_project_indexes_a_folder_of_pages_through_the_component(project, tmp_path):
    root, env = project
    pages = tmp_path / "pages"
    write_corpus(pages)
    listed = run(dg("list", "components"), root, env).stdout
    assert TYPE in listed and "Batch inference kept fresh" in listed

    run(dg("scaffold", "defs", TYPE, "handbook", "--pages", str(pages)), root, env)
    defs_folder = root / "src" / "docs" / "defs" / "handbook"
    assert (defs_folder / "defs.yaml").is_file() and (defs_folder / "pipeline.yaml").is_file()
    assert "validated successfully" in run(dg("check", "yaml"), root, env).stdout
    run(dg("check", "defs"), root, env)

    launched = run(
        dg("launch", "--job", "embedding_job", "--partition", "handbook"),
        root,
        env,
        timeout=600,
    )
    assert "RUN_SUCCESS" in launched.stdout + launched.stderr
    assert (root / ".batch_pipeline").is_dir()  # the state, in the project

    config = defs_folder / "pipeline.yaml"
    found = run(
        [
            "batch-pipeline",  # the command the package installed into the project's venv
            "--config",
            str(config),
            "search",
            "how do I reset my password",
            "--collection",
            "handbook",
            "-k",
            "1",
        ],
        root,
        env,
    ).stdout
    assert found.startswith("1. ") and "account/reset-password.md" in found.splitlines()[0]


def test_a_bad_field_is_refused_by_dg_check_naming_it(project, tmp_path):
    root, env = project
    pages = write_corpus(tmp_path / "pages")
    run(dg("scaffold", "defs", TYPE, "handbook", "--pages", str(pages)), root, env)
    defs_folder = root / "src" / "docs" / "defs" / "handbook"
    defs_yaml = defs_folder / "defs.yaml"
    defs_yaml.write_text(defs_yaml.read_text().replace("config_path:", "config_pth:"))
    refused = subprocess.run(dg("check", "yaml"), cwd=root, env=env, capture_output=True, text=True)
    assert refused.returncode != 0
    assert "config_pth" in refused.stdout + refused.stderr

    defs_yaml.write_text(defs_yaml.read_text().replace("config_pth:", "config_path:"))
    config = defs_folder / "pipeline.yaml"
    config.write_text(config.read_text() + "sensor: {interval_seconds: 0}\n")
    refused = subprocess.run(dg("check", "defs"), cwd=root, env=env, capture_output=True, text=True)
    said = refused.stdout + refused.stderr
    assert refused.returncode != 0
    # the CLI's loader's own words
    assert f"{config}: invalid configuration" in said
    assert "sensor.interval_seconds: Input should be greater than or equal to 1" in said


def test_the_package_pip_builds_carries_the_component_and_its_entry_point(wheel):
    """`pip install` of the checkout into another project installs this wheel: every
    package the component imports, the dg entry point, and none of the repository's data."""
    names = zipfile.ZipFile(wheel).namelist()
    for module in (
        "batch_pipeline/components/pipeline_file.py",
        "batch_pipeline/components/scaffolder.py",
        "batch_pipeline/definitions/__init__.py",
        "assets/product_stages.py",
        "resources/pipeline.py",
        "sensors/__init__.py",
        "batch_pipeline/definitions/sample/defs.yaml",  # the sample's code location
    ):
        assert module in names, module
    assert not [name for name in names if name.startswith(("data/", "tests/"))]
    (entry_points,) = [name for name in names if name.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[dagster_dg_cli.registry_modules]" in text
    assert "batch_pipeline = batch_pipeline" in text
