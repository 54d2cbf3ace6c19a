"""OpenVINO's usage telemetry stays off: the engine's openvino imports send nothing and write
no client id under the home (a plain `import openvino` writes one and tries to send an
event). Real openvino, in a subprocess with a home of its own and no `CI` variable, which
OpenVINO reads as a reason not to send."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

THROUGH_THE_ENGINE = """
from batch_pipeline.inference.openvino_model import openvino_dtypes, openvino_version
assert openvino_version() and openvino_dtypes()[0] == "float32"
import openvino_telemetry
assert openvino_telemetry.Telemetry().consent is False
"""

IMPORTED_BEFORE = """
import openvino  # consents by default, as a user's own code might
import openvino_telemetry
assert openvino_telemetry.Telemetry().consent is True
from batch_pipeline.inference.openvino_model import telemetry_off
telemetry_off()
assert openvino_telemetry.Telemetry().consent is False
"""


def run_in_fresh_home(home: Path, code: str) -> None:
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "TF_BUILD", "JENKINS_URL"}}
    env["HOME"] = str(home)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_engine_imports_openvino_without_its_telemetry(tmp_path):
    run_in_fresh_home(tmp_path / "home", THROUGH_THE_ENGINE)
    assert not (tmp_path / "home" / "intel").exists()  # no client id, no stats


def test_telemetry_off_declines_after_openvino_was_imported(tmp_path):
    run_in_fresh_home(tmp_path / "home", IMPORTED_BEFORE)
