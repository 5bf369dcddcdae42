"""Every citation in the repository points at something that exists: a cited docs page is a file, a cited
section ("docs/theory/pdmm.md section 4") is a numbered heading of that page, a cited paragraph title
(`docs/guide/solve.md, "The stopping test"`) is in that page, a README paragraph cited as README "Title" is in
the README, and every relative Markdown link resolves. Nothing cites MATH.md, a file the project never shipped."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT = (".py", ".md", ".toml", ".txt", ".cfg", ".yml", ".yaml")
PAGE = re.compile(r"(docs/[\w/.-]+?\.md)")
SECTION = re.compile(r"(docs/[\w/.-]+?\.md),? (?:sections? )?(\d+(?:(?:, | and |-)\d+)*)")
TITLE = re.compile(r"(docs/[\w/.-]+?\.md|README),? \"([^\"]+)\"")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def tracked_files():
    """The repository's tracked text files (this test file excluded: it names what it looks for)."""
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return [ROOT / name for name in names if name.endswith(TEXT) and name != "tests/test_citations.py"]


FILES = tracked_files()


def numbered_sections(page):
    """The numbers N of the page's '## N. Title' headings."""
    return {int(m) for m in re.findall(r"^#{2,3} (\d+)\.", page.read_text(), re.M)}


def section_numbers(text):
    """'4', '2, 5', '3-5' or '1 and 2' -> the section numbers cited."""
    numbers = set()
    for part in re.split(r", | and ", text):
        low, _, high = part.partition("-")
        numbers.update(range(int(low), int(high or low) + 1))
    return numbers


def citations(pattern):
    """(file, line number, match) of every occurrence of a pattern in the tracked files."""
    for path in FILES:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in pattern.finditer(line):
                yield path.relative_to(ROOT), number, match


def test_the_tracked_files_are_found():
    assert len(FILES) > 100 and ROOT / "pdmm" / "solve.py" in FILES


def test_nothing_cites_the_unshipped_math_file():
    cited = [f"{path}:{number}" for path, number, _ in citations(re.compile(r"MATH\.md"))]
    assert not cited, cited


def test_every_cited_docs_page_exists():
    missing = [
        f"{path}:{number}: {m.group(1)}" for path, number, m in citations(PAGE) if not (ROOT / m.group(1)).is_file()
    ]
    assert not missing, missing


def test_every_cited_section_is_a_numbered_heading_of_its_page():
    missing = []
    for path, number, m in citations(SECTION):
        page = ROOT / m.group(1)
        if page.is_file() and not section_numbers(m.group(2)) <= numbered_sections(page):
            missing.append(f"{path}:{number}: {m.group(0)}")
    assert not missing, missing


def test_every_cited_title_is_in_its_page():
    missing = []
    for path, number, m in citations(TITLE):
        page = ROOT / ("README.md" if m.group(1) == "README" else m.group(1))
        if page.is_file() and m.group(2) not in page.read_text():
            missing.append(f"{path}:{number}: {m.group(0)}")
    assert not missing, missing


@pytest.mark.parametrize("suffix", [".md"])
def test_every_relative_link_in_markdown_resolves(suffix):
    broken = []
    for path, number, m in citations(LINK):
        target = m.group(1)
        if path.suffix == suffix and "://" not in target and not target.startswith("mailto:"):
            if not ((ROOT / path).parent / target).exists():
                broken.append(f"{path}:{number}: {target}")
    assert not broken, broken


def test_the_section_parser_reads_lists_and_ranges():
    assert section_numbers("4") == {4}
    assert section_numbers("2, 5") == {2, 5}
    assert section_numbers("3-5") == {3, 4, 5}
    assert section_numbers("1 and 2") == {1, 2}
