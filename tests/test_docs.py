"""The tutorials run as written: every ```python block and every `pdmm-bridge ...` line of a ```bash block
of docs/getting_started.md and docs/tutorials/*.md, in page order, from a fresh directory (holding a copy of
docs/compare, which the comparison tutorial reads). ```text blocks are shown, not run (the long commands)."""

import re
import shlex
import shutil
from pathlib import Path

import pytest

from experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = [ROOT / "docs" / "getting_started.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)


def blocks(page):
    """(language, code) of every python and bash block of a Markdown page, in order."""
    return BLOCK.findall(page.read_text())


def run_command(line):
    """Run one `pdmm-bridge ...` line through the CLI's main; it must succeed."""
    argv = shlex.split(line)
    assert argv[0] == "pdmm-bridge", f"a tutorial's bash block runs pdmm-bridge only, got {line!r}"
    try:
        main(argv[1:])
    except SystemExit as exit:
        assert exit.code in (0, None), f"{line!r} exited with {exit.code}"


def test_every_tutorial_has_code_to_run():
    assert {page.stem for page in TUTORIALS} >= {"solve", "network", "attention", "compare", "reproduce"}
    assert all(blocks(page) for page in TUTORIALS)


@pytest.mark.parametrize("page", TUTORIALS, ids=[page.stem for page in TUTORIALS])
def test_tutorial_runs_as_written(page, tmp_path, monkeypatch):
    shutil.copytree(ROOT / "docs" / "compare", tmp_path / "docs" / "compare")
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"tutorial_{page.stem}"}
    for language, code in blocks(page):
        if language == "python":
            exec(compile(code, str(page), "exec"), namespace)
        else:
            for line in code.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    run_command(line)
