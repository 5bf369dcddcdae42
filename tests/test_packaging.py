"""What ships in the package: built-in configs and the corpus found by name, the configs command,
--version and help defaults, and the wheel (with py.typed and its classifiers) installed into a fresh venv, run
from another directory. How it is installed: the README's two set-up commands before its test command, a `test`
extra without dashboards, benchopt, PyG, linters or docs tools, .ci/run running the same commands with the `dev`
extra, and CITATION.cff agreeing with pyproject.toml."""

import argparse
import email
import os
import re
import shlex
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from extras import EXTRA_MODULES, needs
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from experiments.cli import HelpFormatter, main
from experiments.config import CONFIG_DIR, builtin_configs, config_path, load_config
from experiments.errors import UsageError, package_version
from experiments.tasks.char_lm import DATA_DIR, read_corpus

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "pdmm", "attention", "bridge", "experiments")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PIP = ["-m", "pip", "--disable-pip-version-check", "--quiet"]
TEST_COMMAND = ["python", "-m", "pytest"]
HEAVY = {  # what the `test` extra must not pull: dashboards, benchopt, PyG, linters, docs tools
    *("wandb", "mlflow", "mlflow-skinny", "tensorboard", "benchopt", "torch-geometric", "ruff", "mypy"),
    *("sphinx", "myst-parser", "numpydoc", "furo", "sphinx-mathjax-offline"),
}
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
def wheel(tmp_path_factory):
    """The wheel built from a copy of the sources, without build isolation (setuptools 70.1 or later builds it)."""
    needs("setuptools", "dev", minversion="70.1")
    tmp = tmp_path_factory.mktemp("packaging")
    source, wheels = tmp / "source", tmp / "wheels"
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, *PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", wheels, source],
        check=True,
    )
    (built,) = wheels.glob("pdmm_bridge-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel):
    """A fresh venv with the wheel installed in it; its directory."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"experiments/configs/repro/belief_char.toml", "experiments/data/tinyshakespeare.txt.gz"} <= names
    venv = wheel.parents[1] / "venv"
    subprocess.run([fresh_venv(venv), *PIP, "install", "--no-deps", "--no-index", wheel], check=True)
    return venv


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


def commands(script):
    """The commands of a shell script or code block, as argument lists: comments and blank lines dropped, lines
    continued with a backslash joined."""
    return [argv for line in script.replace("\\\n", " ").splitlines() if (argv := shlex.split(line, comments=True))]


def readme_setup():
    """(the commands of README.md's bash blocks before its first test command, the test command)."""
    before = []
    for block in re.findall(r"^```bash\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M):
        for argv in commands(block):
            if argv[:3] == TEST_COMMAND:
                return before, argv
            before.append(argv)
    raise AssertionError(f"README.md has no test command ({shlex.join(TEST_COMMAND)})")


def named_extras(argv):
    """The project's extras an install command names (`.[test]`, `.[a,b]`)."""
    return {extra for arg in argv if (found := re.fullmatch(r"\.\[(.+)\]", arg)) for extra in found[1].split(",")}


def pulled(extras):
    """The canonical names of every package the project's `extras` require, its own extras (pdmm-bridge[x])
    followed."""
    optional, own = PROJECT["project"]["optional-dependencies"], canonicalize_name(PROJECT["project"]["name"])
    packages, todo, seen = set(), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra not in seen:
            seen.add(extra)
            requirements = [Requirement(text) for text in optional[extra]]
            todo += [name for r in requirements if canonicalize_name(r.name) == own for name in r.extras]
            packages |= {canonicalize_name(r.name) for r in requirements} - {own}
    return packages


def test_the_readme_sets_up_in_two_commands_then_runs_the_tests():
    """Exactly two commands before the test command: torch pinned, then the project with the `test` extra."""
    setup, test = readme_setup()
    assert test == TEST_COMMAND
    assert len(setup) == 2 and all(argv[:4] == ["python", "-m", "pip", "install"] for argv in setup), setup
    assert re.fullmatch(r"torch==[\d.]+", setup[0][4]) and setup[0][5:] == []  # a pin: the version CI tests
    assert setup[1][4:] == ["-e", ".[test]"]


def test_the_test_extra_pulls_no_dashboard_benchopt_pyg_linter_or_docs_tool():
    setup, _ = readme_setup()
    extras = named_extras(setup[1])
    assert extras == {"test"} and "pytest" in pulled(extras)
    assert pulled(extras) & HEAVY == set()
    assert HEAVY - {"mlflow"} <= pulled({"dev"})  # negative control: the reader finds them (mlflow as -skinny)


def test_ci_runs_the_readme_commands_with_the_dev_extra_and_dev_holds_every_extra():
    setup, test = readme_setup()
    ci = commands((ROOT / ".ci" / "run").read_text())
    dev_setup = [[".[dev]" if arg == ".[test]" else arg for arg in argv] for argv in setup]
    assert [argv for argv in ci if argv[:4] == ["python", "-m", "pip", "install"]] == dev_setup
    assert ci[-1] == test and ci.index(dev_setup[-1]) < ci.index(["python", "-m", "mypy"])
    optional = set(PROJECT["project"]["optional-dependencies"])
    assert pulled(optional - {"dev"}) <= pulled({"dev"})


def test_every_optional_extra_is_one_the_tests_can_skip_on():
    """tests/extras.py names the module that shows each extra installed; `test` and `dev` are not skipped on."""
    assert set(EXTRA_MODULES) == set(PROJECT["project"]["optional-dependencies"]) - {"test", "dev"}


def test_classifiers_agree_with_the_license_python_and_typing():
    classifiers = PROJECT["project"]["classifiers"]
    assert PROJECT["project"]["license"] == {"text": "MIT"} and (ROOT / "LICENSE").read_text().startswith("MIT")
    assert "License :: OSI Approved :: MIT License" in classifiers
    versions = [
        c.rsplit(" :: ", 1)[1] for c in classifiers if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    ]
    assert versions and all(SpecifierSet(PROJECT["project"]["requires-python"]).contains(v) for v in versions)
    assert "Typing :: Typed" in classifiers  # py.typed ships: the wheel test below


def test_the_wheel_ships_py_typed_in_each_package_mypy_checks_and_the_classifiers(wheel):
    archive = zipfile.ZipFile(wheel)
    packages = PROJECT["tool"]["mypy"]["files"]
    assert set(packages) == {"pdmm", "attention", "bridge"}
    assert {f"{package}/py.typed" for package in packages} <= set(archive.namelist())
    (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
    fields = email.message_from_bytes(archive.read(metadata))
    assert fields.get_all("Classifier") == PROJECT["project"]["classifiers"]
    assert set(fields.get_all("Provides-Extra")) == set(PROJECT["project"]["optional-dependencies"])
    required = {canonicalize_name(Requirement(r).name) for r in fields.get_all("Requires-Dist") if ";" not in r}
    assert required and not required & {"numba", "scikit-learn"}  # optional extras, not dependencies


def test_citation_cff_names_this_project_and_version():
    yaml = needs("yaml", "dev")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software" and citation["message"]
    assert citation["title"] == PROJECT["project"]["name"] and citation["version"] == PROJECT["project"]["version"]
    assert citation["license"] == "MIT" and all(author.get("name") for author in citation["authors"])
    released = re.search(rf"^## {re.escape(citation['version'])}, (\S+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert released and str(citation["date-released"]) == released[1]
