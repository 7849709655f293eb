"""Which runner the operator's pods get: its ConfigMaps when its files are there, else its
image (an unreadable folder is logged, not fatal)."""

from __future__ import annotations

from pathlib import Path

from shipyard.plan.settings import OperatorSettings
from shipyard.render.runner_parts import RunnerConfigMaps
from shipyard.runtime.runner_files import runner_of


def test_the_files_give_configmaps_and_a_missing_folder_falls_back_to_the_image(
        tmp_path: Path, caplog) -> None:
    (tmp_path / "runner").write_bytes(b"\x7fELF runner" * 100)
    (tmp_path / "loader").write_bytes(b"\x7fELF loader")
    settings = OperatorSettings(runner_image="reg/runner:1", runner_files=str(tmp_path))
    runner = runner_of(settings)
    assert isinstance(runner, RunnerConfigMaps) and len(runner.names) == 1
    missing = OperatorSettings(runner_image="reg/runner:1",
                               runner_files=str(tmp_path / "absent"))
    assert runner_of(missing) == "reg/runner:1"
    assert "cannot be read" in caplog.text
    assert runner_of(OperatorSettings()) is None  # runner.sh
