"""The figures of `pdmm-bridge compare` say who wins (issue 45): legends outside the data, the rounds the findings
quote marked, bands under the lines, text legible at the width the README shows them, log axes, and learning
curves whose evaluations are visible. Structural checks on the matplotlib Figure, not pixels."""

from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import PolyCollection
from matplotlib.text import Text

from bridge.comparison import CompareTable, per_round, transformer
from bridge.comparison.pairing import headline_methods
from experiments import plots
from experiments.compare_report import load

COMPARE_DATA = Path(__file__).resolve().parents[1] / "docs" / "compare"
README_WIDTH_PX = 880  # about the width at which GitHub shows a README image
MIN_TEXT_PX = 8  # the smallest text height, in pixels at README_WIDTH_PX, that is still read without zooming


@pytest.fixture
def drawn(monkeypatch):
    """Call a plots function and get back the Figure it saved, laid out (without writing a file)."""
    figures = []
    monkeypatch.setattr(plots, "save_figure", lambda fig, path, **options: figures.append(fig))

    def draw(function, *args):
        function(*args, "unused.png")
        (fig,) = figures[-1:]
        FigureCanvasAgg(fig).draw()  # the layout, and a renderer to measure with
        return fig

    return draw


@pytest.fixture(scope="module")
def committed():
    table, _, curves = load(COMPARE_DATA)
    return table, curves


def data_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def assert_legends_clear(fig):
    """No legend's box overlaps any panel's data area or title."""
    renderer = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends, "the figure has no legend"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in data_axes(fig):
            assert not box.overlaps(ax.bbox), f"a legend covers the data of panel {ax.get_title()!r}"
            assert not box.overlaps(ax.title.get_window_extent(renderer)), f"a legend covers {ax.get_title()!r}"


def assert_legible(fig):
    """Every piece of text is at least MIN_TEXT_PX high when the figure is shown README_WIDTH_PX wide."""
    scale = README_WIDTH_PX / fig.get_figwidth()  # pixels per inch on the page
    for text in fig.findobj(Text):
        if text.get_visible() and text.get_text().strip():
            assert text.get_fontsize() / 72 * scale >= MIN_TEXT_PX, f"{text.get_text()!r} is too small to read"


def round_axes(fig):
    return [ax for ax in data_axes(fig) if ax.get_xlabel() == "communication round"]


@pytest.mark.parametrize("every_row", [False, True], ids=["compare.png", "compare_all.png"])
def test_compare_figures_keep_legends_off_the_data_and_mark_the_quoted_rounds(drawn, committed, every_row):
    table, _ = committed
    methods = {name: table.methods for name in table.sets} if every_row else headline_methods(table)
    fig = drawn(plots.plot_compare, table, methods)
    assert_legends_clear(fig)
    assert_legible(fig)
    assert len(round_axes(fig)) == len(table.sets)
    for ax in round_axes(fig):
        marks = {line.get_gid(): set(line.get_xdata()) for line in ax.get_lines() if line.get_gid()}
        assert marks == {f"quoted round {r}": {r} for r in (table.depth, table.rounds)}  # 8 and 32
        left, fourth = ax.transData.transform([(1, 1), (4, 1)])[:, 0]
        assert (fourth - left) / ax.bbox.width >= 0.25, "rounds 1 to 4 are crowded into the left edge"
    for ax in data_axes(fig):
        assert ax.get_yscale() == "log"
        lines = [line for line in ax.get_lines() if not line.get_gid()]
        bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert lines and bands  # 5 seeds: every row has its band
        assert max(band.get_zorder() for band in bands) < min(line.get_zorder() for line in lines)
        assert all(band.get_alpha() <= 0.3 for band in bands)
    assert all(ax.get_xscale() == "log" for ax in data_axes(fig))
    legend_text = [t.get_text() for legend in fig.legends for t in legend.get_texts()]
    assert sum(t.startswith("rounds the findings quote") for t in legend_text) == 1
    assert len(legend_text) == len(set(legend_text)) == len({m for rows in methods.values() for m in rows}) + 1


def test_a_line_that_ends_at_the_depth_is_explained(drawn):
    seeds, depth, rounds = [0, 1, 2], 4, 8
    falling = -0.2 * np.arange(1, rounds + 1) + np.array([[0.0], [0.05], [-0.05]])
    untied = falling.copy()
    untied[:, depth:] = np.nan  # an untied transformer of 4 layers has rounds 1..4 only
    log_errors = {}
    for name in ("a", "b"):
        log_errors["pdmm (tuned per round)", name] = falling
        log_errors["transformer (belief)", name] = untied - 0.1
    rows = {"pdmm (tuned per round)": per_round("pdmm"), "transformer (belief)": transformer("belief", 8)}
    table = CompareTable(seeds, rounds, depth, log_errors, rows, {})
    fig = drawn(plots.plot_compare, table, {name: list(table.methods) for name in table.sets})
    assert "a line ending at round 4: a model of 4 layers has no later round" in fig.get_suptitle()
    assert_legends_clear(fig)
    for ax in round_axes(fig):
        assert {line.get_gid() for line in ax.get_lines() if line.get_gid()} == {"quoted round 4", "quoted round 8"}


def test_learning_curves_with_two_evaluations_show_both_and_say_so(drawn):
    rows = ["transformer (standard)", "transformer (belief)", "transformer (standard, w=4)"]
    curves = [
        {"method": method, "seed": seed, "step": step, "val_loss": 0.5 / step + seed / 100, "val_error": 0.1}
        for method in rows
        for seed in (0, 1)
        for step in (100, 150)
    ]
    fig = drawn(plots.plot_learning_curves, curves)
    assert "2 evaluations per run" in fig.get_suptitle()
    panels = data_axes(fig)
    assert [ax.get_title() for ax in panels] == rows
    for ax in panels:
        assert ax.get_yscale() == "log" and len(ax.get_lines()) == 2
        assert all(line.get_marker() not in (None, "None", "", " ") for line in ax.get_lines())
        assert all(list(line.get_xdata()) == [100, 150] for line in ax.get_lines())
    assert_legends_clear(fig)
    assert_legible(fig)


def test_committed_learning_curves_are_legible_with_one_legend(drawn, committed):
    _, curves = committed
    fig = drawn(plots.plot_learning_curves, curves)
    assert "9 to 40 evaluations per run" in fig.get_suptitle()  # docs/compare/curves.csv: the fewest and most
    assert_legends_clear(fig)
    assert_legible(fig)
    assert [t.get_text() for legend in fig.legends for t in legend.get_texts()] == [f"seed {s}" for s in range(5)]
