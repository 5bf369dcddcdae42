"""The commands stay thin: every experiments/*_command.py parses its arguments, calls the library and writes files,
in at most 160 lines (CONTRIBUTING.md, "Adding things"), and draws nothing itself (the figures are
experiments/plots.py's). Checked by reading the files, so the rule cannot silently rot."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = sorted((ROOT / "experiments").glob("*_command.py"))
MAX_LINES = 160


def too_long(paths):
    """{file name: lines} of the files over MAX_LINES lines."""
    return {path.name: n for path in paths if (n := len(path.read_text().splitlines())) > MAX_LINES}


def drawing(paths):
    """The names of the files that import matplotlib."""
    return [path.name for path in paths if re.search(r"^\s*(import|from) matplotlib\b", path.read_text(), re.M)]


def test_the_commands_are_found():
    assert len(COMMANDS) >= 10 and ROOT / "experiments" / "solve_command.py" in COMMANDS


def test_every_command_is_at_most_160_lines():
    assert not too_long(COMMANDS), f"commands over {MAX_LINES} lines (move the work into a library module)"


def test_no_command_imports_matplotlib():
    assert not drawing(COMMANDS), "commands that draw themselves (move the figure into experiments/plots.py)"


def test_the_checks_catch_a_long_command_and_one_that_draws(tmp_path):
    at_limit, over = tmp_path / "a_command.py", tmp_path / "b_command.py"
    at_limit.write_text("pass\n" * MAX_LINES)
    over.write_text("def run(args):\n    from matplotlib.figure import Figure\n" + "pass\n" * (MAX_LINES - 1))
    assert too_long([at_limit, over]) == {"b_command.py": MAX_LINES + 1}
    assert drawing([at_limit, over]) == ["b_command.py"]
