"""The version: pyproject.toml's, dated as the newest CHANGELOG section, shown by `pdmm-bridge --version`
and recorded by every run (a train run's meta.json here; solve's config.json in test_cli.py)."""

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from experiments.config import load_config
from experiments.errors import package_version
from experiments.train import train

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_newest_changelog_section_is_the_version_and_dated():
    headings = re.findall(r"^## (.*)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert re.fullmatch(rf"{re.escape(VERSION)}, \d{{4}}-\d{{2}}-\d{{2}}", headings[0]), headings[0]


def test_package_version_is_pyprojects():
    assert package_version() == VERSION


def test_the_command_line_shows_pyprojects_version():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    shown = subprocess.run(
        [sys.executable, "-c", "from experiments.cli import main; main()", "--version"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert shown.returncode == 0 and shown.stdout == f"pdmm-bridge {VERSION}\n", shown


def test_a_train_run_records_the_version(tmp_path):
    config = load_config(
        ROOT / "experiments" / "configs" / "shakespeare_char_cpu.toml",
        [
            'task.data="builtin:tinyshakespeare"',
            "model.n_layer=1",
            "model.n_head=2",
            "model.d_model=16",
            "train.block_size=16",
            "train.batch_size=4",
            "train.warmup_iters=1",
            "train.eval_interval=2",
            "train.eval_iters=1",
            "train.checkpoint_interval=2",
            "train.max_iters=2",
            "task.sample_length=4",
        ],
    )
    train(config, tmp_path / "run", progress=False)
    assert json.loads((tmp_path / "run" / "meta.json").read_text())["version"] == VERSION


def load_errors_module(directory):
    """experiments/errors.py copied to directory/pkg/errors.py and imported from there (pyproject beside pkg/)."""
    package = directory / "pkg"
    package.mkdir()
    (package / "errors.py").write_text((ROOT / "experiments" / "errors.py").read_text())
    spec = importlib.util.spec_from_file_location("copied_errors", package / "errors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_outside_a_checkout_the_installed_version_is_recorded(tmp_path):
    try:
        installed = importlib.metadata.version("pdmm-bridge")
    except importlib.metadata.PackageNotFoundError:
        installed = "unknown"
    assert load_errors_module(tmp_path).package_version() == installed


def test_only_a_pyproject_naming_pdmm_bridge_is_read(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "9.9.9"\n')
    assert load_errors_module(tmp_path / "a").package_version() != "9.9.9"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "pyproject.toml").write_text('[project]\nname = "pdmm-bridge"\nversion = "9.9.9"\n')
    assert load_errors_module(tmp_path / "b").package_version() == "9.9.9"
