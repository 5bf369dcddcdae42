"""The solve command as the solver tests call it: a small graph, no progress bars, one --out."""

from experiments.cli import main


def solve_command(out, *options, nodes=15):
    """`pdmm-bridge solve --nodes NODES OPTIONS --out OUT`; the command's exit status."""
    return main(["solve", "--no-progress", "--nodes", str(nodes), *options, "--out", str(out)])


def assert_refused_in_one_line(out, capsys, options, culprit, nodes=15):
    """The command exits 2 with one line on stderr holding `culprit`, and writes no `out`."""
    try:
        solve_command(out, *options, nodes=nodes)
    except SystemExit as exit:
        code = exit.code
    else:
        raise AssertionError(f"solve {' '.join(options)} did not exit")
    message = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in message and culprit in message, message
    assert not out.exists()
