"""docs/RESULTS.md and its figures regenerate byte for byte from what the repository holds (issue 30).

Each section that committed data can rebuild is blanked in a copy of RESULTS.md and written again by the
command that made it; the copy must then equal the committed file byte for byte, so a refactor of the
reporting code that changes one character of a table, a verdict or a figure fails here. PNG files are
compared byte for byte (matplotlib writes no date into them) when the matplotlib that draws them here is the
one named in the committed file's Software chunk; under another one the byte check is skipped.

- compare: `pdmm-bridge compare --from docs/compare --results ... --readme ...` (seeds.csv, curves.csv,
  compare.json; nothing is trained), with docs/figures/compare.png, compare_all.png and learning.png, and the
  README's findings block (bridge.findings), blanked in a copy of README.md and written again the same way.
- repro-summary: rebuilt from the claims comments of the repro sections of RESULTS.md itself.
- network-sweep (slow: minutes): recomputed by `pdmm-bridge network-sweep --results ...`, which stores
  no rows to re-render from; deterministic, so the same section and figure.
- learned-pdmm (slow): recomputed by `pdmm-bridge learn-pdmm ... --results ...` (its results.json lies
  under runs/, which is not committed).

- repro-NAME: `pdmm-bridge report docs/repro/NAME --results docs/RESULTS.md --force` from the committed runs
  under docs/repro/NAME (no checkpoints: the probe and lambda numbers come from each run's
  checkpoint_stats.json), with its figures under docs/figures/repro/; one test per committed sweep.
"""

import re
import shutil
from pathlib import Path

import pytest

from experiments.cli import main
from experiments.repro_report import SUMMARY_SECTION, refresh_summary

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "RESULTS.md"
README = ROOT / "README.md"
FIGURES = ROOT / "docs" / "figures"
COMPARE_DATA = ROOT / "docs" / "compare"
COMPARE_FIGURES = ("compare.png", "compare_all.png", "learning.png")
REPRO_DATA = ROOT / "docs" / "repro"
COMMITTED_SWEEPS = sorted(path.name for path in REPRO_DATA.iterdir() if (path / "sweep.json").is_file())


def blank(text, name):
    """`text` with section `name` emptied, its begin marker without sizes (so no larger run is guarded)."""
    pattern = re.compile(
        rf"<!-- begin {re.escape(name)}(?: \{{[^\n]*?\}})? -->\n.*?<!-- end {re.escape(name)} -->", re.S
    )
    emptied, count = pattern.subn(f"<!-- begin {name} -->\n<!-- end {name} -->", text)
    assert count == 1, f"RESULTS.md has {count} sections named {name}"
    return emptied


def results_copy(directory, *sections):
    """A copy of RESULTS.md under directory/docs with `sections` blanked; its path."""
    docs = directory / "docs"
    docs.mkdir(parents=True)
    text = RESULTS.read_text()
    for name in sections:
        text = blank(text, name)
    assert text != RESULTS.read_text()
    (docs / "RESULTS.md").write_text(text)
    return docs / "RESULTS.md"


def png_software(path):
    """The Software text chunk of a PNG (matplotlib writes its version there), or None."""
    data, at = path.read_bytes(), 8
    while at + 8 <= len(data):
        length = int.from_bytes(data[at : at + 4], "big")
        kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Software\0"):
            return body.split(b"\0", 1)[1].decode("latin-1")
        at += 12 + length
    return None


def assert_same_figure(drawn, committed):
    """`drawn` equals the committed PNG byte for byte; skipped only when another matplotlib drew the committed one."""
    assert drawn.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{drawn} is not a PNG"
    if drawn.read_bytes() == committed.read_bytes():
        return
    theirs, ours = png_software(committed), png_software(drawn)
    if theirs != ours:
        pytest.skip(
            f"{committed.name} was drawn by {theirs}, this is {ours}: PNG bytes are compared only between equals"
        )
    raise AssertionError(f"{drawn} differs from {committed} (both drawn by {ours})")


@pytest.fixture(scope="module")
def compare_again(tmp_path_factory):
    """`compare --from docs/compare` into a fresh directory, its section into a copy of RESULTS.md and its findings
    into a copy of README.md (the copies under where/docs and where)."""
    where = tmp_path_factory.mktemp("compare")
    results = results_copy(where, "compare")
    (where / "README.md").write_text(blank(README.read_text(), "findings"))
    code = main(
        [
            "compare",
            "--from",
            str(COMPARE_DATA),
            "--out",
            str(where / "out"),
            "--results",
            str(results),
            "--readme",
            str(where / "README.md"),
            "--no-progress",
        ]
    )
    assert code == 0
    return where / "out", results


def test_readme_findings_regenerate_byte_for_byte(compare_again):
    """Every README finding is written by the code from the committed per-seed data (bridge.findings)."""
    _, results = compare_again
    assert (results.parent.parent / "README.md").read_text() == README.read_text()


def test_compare_section_regenerates_byte_for_byte(compare_again):
    _, results = compare_again
    assert results.read_text() == RESULTS.read_text()


def test_compare_data_round_trips_unchanged(compare_again):
    out, _ = compare_again
    for name in ("seeds.csv", "curves.csv", "compare.json"):
        assert (out / name).read_bytes() == (COMPARE_DATA / name).read_bytes(), name


@pytest.mark.parametrize("name", COMPARE_FIGURES)
def test_compare_figures_regenerate(compare_again, name):
    _, results = compare_again
    drawn = results.parent / "figures" / name
    assert drawn.is_file() and drawn.read_bytes() == (compare_again[0] / name).read_bytes()
    assert_same_figure(drawn, FIGURES / name)


def test_repro_summary_regenerates_from_the_repro_sections(tmp_path):
    results = results_copy(tmp_path, SUMMARY_SECTION)
    refresh_summary(results)
    assert results.read_text() == RESULTS.read_text()


@pytest.mark.parametrize("name", COMMITTED_SWEEPS)
def test_repro_section_and_figures_regenerate_from_the_committed_runs(name, tmp_path, monkeypatch):
    results = results_copy(tmp_path, f"repro-{name}")
    shutil.copytree(REPRO_DATA / name, tmp_path / "docs" / "repro" / name)
    assert not list((tmp_path / "docs" / "repro" / name).rglob("*.pt")), "checkpoints are not committed"
    monkeypatch.chdir(tmp_path)  # the section quotes its command, paths relative to the repository's root
    assert main(["report", f"docs/repro/{name}", "--results", "docs/RESULTS.md", "--force"]) == 0
    assert results.read_text() == RESULTS.read_text()
    drawn = sorted((tmp_path / "docs" / "figures" / "repro").glob(f"{name}_*.png"))
    assert drawn, f"the report drew no figures for {name}"
    for figure in drawn:
        assert_same_figure(figure, FIGURES / "repro" / figure.name)


def test_blanking_a_section_is_seen():
    """The negative control of the tests above: a blanked section no longer equals the committed file."""
    text = RESULTS.read_text()
    for name in ("compare", SUMMARY_SECTION, "network-sweep", "learned-pdmm"):
        emptied = blank(text, name)
        assert emptied != text and len(emptied) < len(text) - 500


@pytest.mark.slow
def test_network_sweep_section_and_figure_regenerate(tmp_path, monkeypatch):
    results = results_copy(tmp_path, "network-sweep")
    monkeypatch.setattr("sys.argv", ["pdmm-bridge"])  # the section names the command as the docs run it
    assert main(["network-sweep", "--out", str(tmp_path / "out"), "--results", str(results)]) == 0
    assert results.read_text() == RESULTS.read_text()
    assert_same_figure(results.parent / "figures" / "network_sweep.png", FIGURES / "network_sweep.png")


@pytest.mark.slow
def test_learned_pdmm_section_and_figure_regenerate(tmp_path):
    results = results_copy(tmp_path, "learned-pdmm")
    command = "learn-pdmm --layers 10,20 --train-graphs 16 --test-graphs 16 --steps 150 --seed 0".split()
    assert main([*command, "--out", str(tmp_path / "out"), "--results", str(results)]) == 0
    assert results.read_text() == RESULTS.read_text()
    assert_same_figure(results.parent / "figures" / "learned_pdmm_errors.png", FIGURES / "learned_pdmm_errors.png")


def test_png_software_reads_the_drawing_matplotlib():
    assert png_software(FIGURES / "compare.png").startswith("Matplotlib version")


def test_blank_refuses_a_missing_section():
    with pytest.raises(AssertionError):
        blank("# Results\n", "compare")
