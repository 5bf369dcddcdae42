"""What ships in the package: built-in configs and the corpus found by name, the configs command,
--version and help defaults, and the wheel installed into a fresh venv, run from another directory
."""

import argparse
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from experiments.cli import HelpFormatter, main
from experiments.common import UsageError, package_version
from experiments.config import CONFIG_DIR, builtin_configs, config_path, load_config
from experiments.tasks.char_lm import DATA_DIR, read_corpus

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "pdmm", "attention", "bridge", "experiments")
TINY_LM = [
    "model.n_layer=1",
    "model.n_head=2",
    "model.d_model=16",
    "train.block_size=16",
    "train.batch_size=4",
    "train.max_iters=5",
    "train.eval_interval=5",
    "train.eval_iters=1",
    "task.sample_length=20",
]
TINY_COMPARE = [
    "train.max_iters=6",
    "train.eval_interval=3",
    "train.checkpoint_interval=3",
    "model.n_layer=2",
    "model.d_model=16",
    "model.n_head=2",
    "train.batch_size=4",
    "task.val_graphs=2",
    "task.n_min=8",
    "task.n_max=12",
    "task.radius=0",
]


def test_builtin_configs_are_found_by_name_and_an_existing_file_wins(tmp_path, monkeypatch):
    assert {"shakespeare_char_cpu", "graph_consensus", "repro/belief_char"} <= set(builtin_configs())
    belief_char = CONFIG_DIR / "repro" / "belief_char.toml"
    assert config_path("repro/belief_char") == config_path("repro/belief_char.toml") == belief_char
    assert load_config("shakespeare_char_cpu").task.data == "builtin:tinyshakespeare"
    monkeypatch.chdir(tmp_path)
    Path("modular97").write_text((CONFIG_DIR / "digits_vit.toml").read_text())
    assert load_config("modular97").task.name == "digits"
    with pytest.raises(UsageError, match="no_such is neither a file nor a built-in config"):
        load_config("no_such")


def test_builtin_corpus_is_tiny_shakespeare_and_a_file_path_still_works(tmp_path):
    assert (DATA_DIR / "tinyshakespeare.txt.gz").stat().st_size < 600_000
    text = read_corpus("builtin:tinyshakespeare")
    assert len(text) == 1_115_394 and text.startswith("First Citizen:")
    (tmp_path / "corpus.txt").write_text(text[:1000], encoding="utf-8")
    assert read_corpus(str(tmp_path / "corpus.txt")) == text[:1000]
    with pytest.raises(UsageError, match="unknown built-in corpus 'builtin:nope'; built-in: builtin:tinyshakespeare"):
        read_corpus("builtin:nope")


def test_configs_command_lists_every_builtin_with_its_description(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(builtin_configs())
    assert "repro/belief_char          BeliefFormer in a causal character GPT on Shakespeare" in lines


def test_version_and_help_show_the_version_and_defaults(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out == f"pdmm-bridge {package_version()}\n"
    with pytest.raises(SystemExit):
        main(["configs", "--help"])
    assert "\n    pdmm-bridge configs\n" in capsys.readouterr().out  # the description as written
    parser = argparse.ArgumentParser(formatter_class=HelpFormatter)
    parser.add_argument("--iters", type=int, default=0, help="iterations")
    parser.add_argument("--out", help="directory")
    parser.add_argument("--batches", default=4, help="batches (default 4)")
    text = " ".join(parser.format_help().split())
    assert "iterations (default: 0)" in text and "--out OUT directory --batches" in text
    assert "(default: 4)" not in text


def fresh_venv(path):
    """A venv at `path` that sees this interpreter's packages (torch, numpy, ...) but has no pdmm-bridge."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(path)], check=True)
    python = path / "bin" / "python"
    if sys.prefix != sys.base_prefix:  # in a venv, --system-site-packages reaches the base Python, not this venv
        purelib = subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        (Path(purelib) / "outer-site.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return python


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with the wheel, built from a copy of the sources, installed in it; its directory."""
    tmp = tmp_path_factory.mktemp("packaging")
    source, wheels = tmp / "source", tmp / "wheels"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    pip = ["-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run(
        [sys.executable, *pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, source],
        check=True,
    )
    (wheel,) = wheels.glob("pdmm_bridge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"experiments/configs/repro/belief_char.toml", "experiments/data/tinyshakespeare.txt.gz"} <= names
    subprocess.run([fresh_venv(tmp / "venv"), *pip, "install", "--no-deps", "--no-index", wheel], check=True)
    return tmp / "venv"


def run_in(venv, program, *args):
    """Run the venv's `program` from a directory outside the checkout, without PYTHONPATH; its stdout."""
    work = venv.parent / "work"
    work.mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run([venv / "bin" / program, *args], cwd=work, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_wheel_runs_configs_and_train_on_the_builtin_corpus_from_another_directory(venv, tmp_path):
    assert Path(run_in(venv, "python", "-c", "import experiments; print(experiments.__file__)")).is_relative_to(venv)
    assert "shakespeare_char_cpu" in run_in(venv, "pdmm-bridge", "configs")
    run_in(
        venv,
        "pdmm-bridge",
        "train",
        "shakespeare_char_cpu",
        *[f"--set={s}" for s in TINY_LM],
        "--out",
        tmp_path / "lm",
        "--no-progress",
    )
    assert (tmp_path / "lm" / "sample.txt").is_file()


def test_wheel_runs_compare_on_the_builtin_graph_consensus(venv, tmp_path):
    run_in(
        venv,
        "pdmm-bridge",
        "compare",
        "graph_consensus",
        "--residuals",
        "standard",
        "--tied",
        "none",
        "--seeds",
        "0",
        "--rounds",
        "3",
        "--test-graphs",
        "1",
        "--tune-graphs",
        "1",
        "--learned-steps",
        "2",
        "--finetune-steps",
        "2",
        *[f"--set={s}" for s in TINY_COMPARE],
        "--out",
        tmp_path / "cmp",
        "--no-progress",
    )
    assert (tmp_path / "cmp" / "compare.csv").is_file()
