"""Without scikit-learn (the optional `sklearn` extra) what needs its bundled data refuses in one line naming the
extra to install: pdmm.datasets.breast_cancer with an ImportError, the solve and train commands with exit status 2,
nothing written. (Without numba the torch expressions serve the CPU: tests/test_draws.py.)"""

import pytest
from extras import hide

import pdmm
from experiments.cli import main

INSTALL = 'pip install "pdmm-bridge[sklearn]"'


def test_the_breast_cancer_data_names_the_extra_to_install(monkeypatch):
    hide(monkeypatch, "sklearn")
    with pytest.raises(ImportError) as err:
        pdmm.datasets.breast_cancer(pdmm.topology("ring", n=5))
    assert str(err.value) == f"the breast-cancer data needs scikit-learn: {INSTALL}"


@pytest.mark.parametrize(
    "argv",
    [
        ["solve", "--no-progress", "--problem", "logistic", "--data", "builtin:breast_cancer"],
        ["train", "digits_vit", "--no-progress", "--set", "train.max_iters=1"],
    ],
    ids=["solve", "train"],
)
def test_a_command_refuses_in_one_line_and_writes_nothing(monkeypatch, tmp_path, capsys, argv):
    hide(monkeypatch, "sklearn")
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--out", str(tmp_path / "run")])
    message = capsys.readouterr().err.strip()
    assert exit.value.code == 2 and "\n" not in message and "needs scikit-learn" in message and INSTALL in message
    assert not (tmp_path / "run").exists()
