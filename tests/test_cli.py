"""pdmm-bridge solve (outputs, --compare, --data, bad input) and the synthetic problems behind it; the command line's
answers to no command and to unrecognized options."""

import csv
import json

import numpy as np
import pytest

import pdmm
from experiments.cli import COMMANDS, main
from experiments.errors import package_version
from pdmm.synthetic import KINDS, make_data, make_problem


def solve(tmp_path, *options):
    """Run `pdmm-bridge solve OPTIONS --out tmp_path/run`; return (exit code, output directory)."""
    out = tmp_path / "run"
    return main(["solve", *options, "--out", str(out)]), out


def history(out):
    with open(out / "history.csv", newline="") as file:
        return list(csv.DictReader(file))


def test_default_solve_writes_config_history_result_and_plot(tmp_path, capsys):
    code, out = solve(tmp_path)
    assert code == 0
    config = json.loads((out / "config.json").read_text())
    assert config["version"] == package_version() != ""
    assert config["args"]["problem"] == "averaging" and config["args"]["graph"] == "random_geometric"
    assert config["graph"]["n"] == 100 and config["graph"]["edges"] > 100
    rows = history(out)
    assert list(rows[0]) == ["method", "iteration", "residual", "objective", "error"]
    assert config["methods"]["pdmm"]["iterations"] == len(rows) > 0
    assert config["methods"]["pdmm"]["error"] == pytest.approx(float(rows[-1]["error"]))
    with np.load(out / "result.npz") as result:
        assert result["x_pdmm"].shape == result["x_star"].shape == (100, 3)
    assert (out / "convergence.png").read_bytes()[:4] == b"\x89PNG"
    summary = capsys.readouterr().out.strip()
    assert summary.startswith("pdmm: ") and f"{len(rows)} iterations" in summary and summary.endswith(f"-> {out}")


def test_compare_overlays_three_methods_that_all_reach_the_reference(tmp_path):
    code, out = solve(tmp_path, "--compare", "pdmm,qa-pdmm,admm", "--nodes", "20", "--iters", "1000")
    assert code == 0
    rows = history(out)
    assert list(dict.fromkeys(row["method"] for row in rows)) == ["pdmm", "qa-pdmm", "admm"]
    config = json.loads((out / "config.json").read_text())
    for method in ("pdmm", "qa-pdmm", "admm"):
        last = [row for row in rows if row["method"] == method][-1]
        assert float(last["error"]) < 1e-6
        assert config["methods"][method]["converged"]
    assert config["methods"]["qa-pdmm"]["params"] == {"rho": 1.0, "theta": 1.0, "eta": "L"}
    with np.load(out / "result.npz") as result:
        assert set(result) == {"x_pdmm", "x_qa-pdmm", "x_admm", "x_star"}


def test_data_file_gives_the_same_x_as_pdmm_solve(tmp_path):
    data = make_data("least_squares", 10, dim=2, samples=4, seed=3)  # not the CLI's seed-0 synthetic data
    np.savez(tmp_path / "data.npz", **data)
    code, out = solve(
        tmp_path,
        "--problem",
        "least_squares",
        "--data",
        str(tmp_path / "data.npz"),
        "--graph",
        "ring",
        "--nodes",
        "10",
        "--ridge",
        "0.5",
        "--iters",
        "300",
        "--reference",
        "none",
    )
    assert code == 0
    G = pdmm.topology("ring", 10)
    expected = pdmm.solve(pdmm.least_squares(G, data["H"], data["y"], ridge=0.5), max_iter=300)
    with np.load(out / "result.npz") as result:
        np.testing.assert_allclose(result["x_pdmm"], expected.x, rtol=0, atol=1e-12)
        assert "x_star" not in result


def test_divergence_still_writes_the_run_and_exits_1(tmp_path, capsys):
    code, out = solve(
        tmp_path,
        "--problem",
        "quadratic",
        "--method",
        "qa-pdmm",
        "--eta",
        "0.01",
        "--nodes",
        "20",
        "--reference",
        "none",
    )
    assert code == 1
    assert "qa-pdmm diverged at iteration" in capsys.readouterr().err
    assert json.loads((out / "config.json").read_text())["methods"]["qa-pdmm"]["diverged"]
    assert len(history(out)) > 0 and (out / "convergence.png").exists()


@pytest.mark.parametrize(
    "options, culprit",
    [
        (["--graph", "no_such_topology"], "no_such_topology"),
        (["--rho", "0"], "--rho"),
        (["--data", "{tmp}/missing.npz"], "missing.npz"),
        (["--problem", "no_such_problem"], "no_such_problem"),
        (["--method", "no_such_method"], "no_such_method"),
        (["--problem", "lasso", "--method", "qa-pdmm"], "smooth"),
        (["--method", "admm", "--theta", "0.5"], "--theta"),
        (["--data", "{tmp}/missing.npz", "--dim", "4"], "--dim"),
    ],
)
def test_bad_input_is_one_error_line_and_exit_code_2(tmp_path, capsys, options, culprit):
    with pytest.raises(SystemExit) as exit:
        solve(tmp_path, "--nodes", "10", *(option.format(tmp=tmp_path) for option in options))
    assert exit.value.code == 2
    message = capsys.readouterr().err.strip()
    assert message.startswith("pdmm-bridge solve: error: ") and "\n" not in message
    assert culprit in message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", KINDS)
def test_every_synthetic_kind_solves_to_its_reference(kind):
    G = pdmm.topology("random_geometric", 10, seed=1)
    problem = make_problem(kind, G, make_data(kind, 10, dim=3, samples=6, seed=2))
    x = pdmm.solve(problem, rho=0.3, max_iter=3000, tol=1e-8).x
    x_star = pdmm.reference(problem)
    assert np.linalg.norm(x - x_star) <= 1e-6 * np.linalg.norm(x_star)


def test_make_data_shapes_batches_and_labels():
    assert make_data("least_squares", 5, dim=2, samples=4)["H"].shape == (5, 4, 2)
    batched = make_data("quadratic", 5, dim=2, batch=3)
    assert batched["P"].shape == (3, 5, 2, 2) and batched["q"].shape == (3, 5, 2)
    assert np.all(np.linalg.eigvalsh(batched["P"]) > 0)
    assert set(np.unique(make_data("logistic", 5)["y"])) == {-1.0, 1.0}
    assert make_problem("averaging", pdmm.topology("ring", 5), make_data("averaging", 5, batch=3)).batch == 3
    np.testing.assert_array_equal(make_data("averaging", 5, seed=7)["a"], make_data("averaging", 5, seed=7)["a"])


def test_make_problem_names_an_unknown_kind_and_missing_arrays():
    G = pdmm.topology("ring", 5)
    with pytest.raises(ValueError, match="unknown problem kind 'ridge'"):
        make_problem("ridge", G, {})
    with pytest.raises(ValueError, match=r"missing \['y'\]"):
        make_problem("logistic", G, {"X": np.ones((5, 4, 2))})


def test_each_command_summary_is_the_one_its_module_registers():
    """cli lists the commands it does not import by COMMANDS' summaries: they must be the modules' own."""
    import argparse

    from experiments.cli import command_module

    for name, (_, summary) in COMMANDS.items():
        subparsers = argparse.ArgumentParser().add_subparsers()
        command_module(name).add_parser(subparsers)
        registered = {action.dest: action.help for action in subparsers._choices_actions}
        assert registered == {name: summary}


def test_no_command_lists_the_commands_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exit:
        main([])
    assert exit.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and lines[0].startswith("usage: pdmm-bridge")
    assert lines[-1] == "pdmm-bridge: error: no command given: choose one of the commands above"
    listed = [line.split()[0] for line in lines if line.startswith("    ") and line.split()]
    assert [name for name in listed if name in COMMANDS] == list(COMMANDS)


@pytest.mark.parametrize(
    "argv, unrecognized, hint",
    [
        (["train", "shakespeare_char_cpu", "--device", "cuda"], "--device cuda", "--set train.device=cuda"),
        (["sweep", "shakespeare_char_cpu", "--n-layer=2"], "--n-layer=2", "--set model.n_layer=2"),
        (
            ["train", "shakespeare_char_cpu", "--lr", "--device", "cuda"],
            "--lr --device cuda",
            "--set train.lr=VALUE --set train.device=cuda",
        ),
        (["train", "--device", "cuda"], "--device", "--set train.device=cuda"),  # argparse took cuda for the config
        (["train", "--device", "cuda", "modular97"], "--device modular97", "--set train.device=cuda"),
        (["train", "shakespeare_char_cpu", "--bogus", "1"], "--bogus 1", ""),  # no such key
        (["solve", "--max-iters", "5"], "--max-iters 5", ""),  # a key of [train], but solve takes no --set
    ],
)
def test_an_unrecognized_option_that_names_a_config_key_is_answered_with_its_set(
    tmp_path, capsys, argv, unrecognized, hint
):
    with pytest.raises(SystemExit) as exit:
        main([*argv, "--out", str(tmp_path / "run")])
    assert exit.value.code == 2
    expected = f"pdmm-bridge {argv[0]}: error: unrecognized arguments: {unrecognized}"
    assert capsys.readouterr().err == expected + (f"; config keys are set with {hint}" if hint else "") + "\n"
    assert not (tmp_path / "run").exists()


def test_a_config_key_without_a_config_is_answered_with_its_set(capsys):
    """`train --device=cuda`: argparse finds no config and leaves --device=cuda unparsed; the error says both."""
    with pytest.raises(SystemExit) as exit:
        main(["train", "--device=cuda"])
    assert exit.value.code == 2
    assert capsys.readouterr().err == (
        "pdmm-bridge train: error: the following arguments are required: config; config keys are set with "
        "--set train.device=cuda\n"
    )


ARGUMENT_ERRORS = {  # one argument error of each command, refused by its parser
    "solve": ["solve", "--compare", "pdmm:bogus=1"],
    "train": ["train", "--device", "cuda"],
    "sweep": ["sweep", "shakespeare_char_cpu", "--seeds"],
    "configs": ["configs", "--bogus"],
    "plot": ["plot", "runs/a", "--x", "time"],
    "report": ["report", "runs/sweep", "--metrics", ","],
    "learn-pdmm": ["learn-pdmm", "--layers", "0"],
    "compare": ["compare", "--rounds", "many"],
    "probe": ["probe", "runs/a", "--batches", "some"],
    "network-sweep": ["network-sweep", "--rho", "0"],
    "partition": ["partition", "ring", "--parts", "0", "--out", "shards"],
}


def test_every_command_has_an_argument_error_to_check():
    assert list(ARGUMENT_ERRORS) == list(COMMANDS)


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--version"],
        ["--help"],
        ["configs"],
        ["train", "--device=cuda"],
        ["solve", "--max-iters", "5"],  # unrecognized: solve's defaults (--method, --device) are parsed first
        *([name, "--help"] for name in COMMANDS),
        *ARGUMENT_ERRORS.values(),
    ],
)
def test_help_version_argument_errors_and_configs_do_not_import_torch(argv):
    """They answer at once: nothing imports torch, matplotlib, the libraries or the other commands
    (experiments/cli.py); no command's parser needs a library, so every --help and argument error imports none."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom experiments.cli import main\ntry:\n    print('exit', main(sys.argv[1:]))\n"
        "except SystemExit as end:\n    print('exit', end.code)\nfor name in ('torch', 'matplotlib', 'pdmm'):\n"
        "    assert name not in sys.modules, name + ' imported'\nprint('ok')"
    )
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr
    expected = "exit 0" if "--help" in argv or argv in (["--version"], ["configs"]) else "exit 2"
    assert expected in done.stdout and "Traceback" not in done.stderr, (done.stdout, done.stderr)


def test_a_closed_pipe_ends_the_command_quietly():
    import subprocess
    import sys

    reader = subprocess.Popen(
        [sys.executable, "-m", "experiments", "configs"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    reader.stdout.close()  # the reader goes away before the command writes
    _, err = reader.communicate(timeout=60)
    assert b"Traceback" not in err and reader.returncode in (0, 1), err
