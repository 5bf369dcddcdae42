"""The tutorials run as written: every ```python block and every `pdmm-bridge ...` line of a ```bash block
of docs/getting_started.md and docs/tutorials/*.md, in page order, from a fresh directory (holding a copy of
docs/compare, which the comparison tutorial reads). ```text blocks are shown, not run (the long commands).
The README's Python examples print what they compute when run as a script, and the bridge guide's comparison
runs. The built site needs no network (MathJax ships with it) and its sidebar lists every page once."""

import ast
import re
import shlex
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from extras import needs_extra

from experiments.cli import main

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = [ROOT / "docs" / "getting_started.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
BLOCK = re.compile(r"^```(python|bash)\n(.*?)^```", re.S | re.M)
EXTRAS = re.compile(r'pip install "pdmm-bridge\[([\w,]+)\]"')  # the optional extras a page says it needs


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
    for extra in (name for names in EXTRAS.findall(page.read_text()) for name in names.split(",")):
        needs_extra(extra)
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


def test_readme_python_examples_print_what_they_compute(tmp_path, monkeypatch, capsys):
    """A bare expression prints nothing in a script: every statement that computes a value assigns or prints it."""
    examples = [code for language, code in blocks(ROOT / "README.md") if language == "python"]
    assert len(examples) >= 2
    monkeypatch.chdir(tmp_path)
    for code in examples:
        silent = [node.lineno for node in ast.parse(code).body if isinstance(node, ast.Expr) and not is_print(node)]
        assert not silent, f"lines {silent} of a README example show nothing when run as a script: {code!r}"
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
        assert capsys.readouterr().out.strip(), f"a README example prints nothing: {code!r}"


def test_the_guides_comparison_trains_its_transformer_row_through_the_hook():
    """docs/guide/bridge.md's Python comparison runs as written: bridge.compare trains the transformer row through
    the guide's train hook for every seed and evaluates it on every held-out set beside the classical rows."""
    [code] = [code for language, code in blocks(ROOT / "docs" / "guide" / "bridge.md") if "bridge.compare(" in code]
    namespace = {"__name__": "guide"}
    exec(compile(code, "docs/guide/bridge.md", "exec"), namespace)
    table = namespace["table"]
    assert {seed: list(fitted["training"]) for seed, fitted in table.fitted.items()} == {
        0: ["transformer (standard)"],
        1: ["transformer (standard)"],
    }
    assert all(fitted["training"]["transformer (standard)"]["steps"] > 0 for fitted in table.fitted.values())
    assert {name for method, name in table.log_errors if method == "transformer (standard)"} == set(table.sets)
    assert table.sent["transformer (standard)"] == 32 and "pdmm (tuned per round)" in table.methods


def is_print(node):
    """Whether an expression statement is a call of print."""
    return isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name) and node.value.func.id == "print"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The HTML site built from docs/ as .ci/run builds it (about 20 s on two cores), in a temporary directory."""
    needs_extra("docs")
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return out


def test_the_site_loads_no_script_or_stylesheet_from_the_network(site):
    """MathJax and every other script come with the site, so the maths renders offline (docs/conf.py)."""
    mathjax = set()
    for page in sorted(site.rglob("*.html")):
        html = page.read_text()
        sources = re.findall(r'<script\b[^>]*\bsrc="([^"]*)"', html)
        sources += re.findall(r'<link\b[^>]*\brel="stylesheet"[^>]*\bhref="([^"]*)"', html)
        remote = [source for source in sources if re.match(r"(https?:)?//", source)]
        assert not remote, f"{page.relative_to(site)} loads {remote} from the network"
        mathjax |= {(page.parent / source).resolve() for source in sources if "mathjax" in source.lower()}
    assert mathjax and all(path.is_file() and path.is_relative_to(site) for path in mathjax), mathjax


def test_the_sidebar_lists_every_page_once(site):
    html = (site / "index.html").read_text()
    tree = html[html.index('<div class="sidebar-tree">') :]
    links = re.findall(r'href="([^"#]+)"', tree[: tree.index("</div>")])
    assert {"theory/index.html", "theory/pdmm.html", "averaging.html"} <= set(links)
    assert [link for link, count in Counter(links).items() if count > 1] == []
