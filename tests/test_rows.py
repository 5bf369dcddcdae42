"""bridge.comparison.rows and bridge.comparison.pairing: every row is data read back from its label alone
(row_of, what compare --from does), its fitted keys are the ones compare.json holds, and the families of
comparisons follow from the rows' fields the way the committed report pairs them (docs/guide/bridge.md,
"Rows as data")."""

import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from tiny_runs import fails

import attention
from bridge.comparison import (
    BEST_TRANSFORMER,
    CATALOGUE,
    FITTED,
    TUNED,
    Row,
    numbers_sent,
    per_round,
    row_of,
    transformer,
)
from bridge.comparison.pairing import (
    against_oracles,
    at_equal_numbers,
    at_equal_rounds,
    equal_numbers,
    headline_comparisons,
    headline_methods,
    tied_transformers,
)
from experiments.compare_report import load

COMMITTED = Path(__file__).resolve().parents[1] / "docs" / "compare"
BEST, SAFE = "best classical (chosen on tuning data)", "best non-diverging classical (chosen on tuning data)"


@pytest.fixture(scope="module")
def committed():
    """(table, meta) of the committed comparison, read back from its files."""
    table, meta, _ = load(COMMITTED)
    return table, meta


def committed_sent():
    """{label: numbers sent per edge and round} straight from the committed seeds.csv."""
    with open(COMMITTED / "seeds.csv", newline="") as file:
        return {
            row["method"]: None if row["numbers_sent"] == "" else int(row["numbers_sent"]) // int(row["round"])
            for row in csv.DictReader(file)
        }


@pytest.mark.parametrize("label", sorted(CATALOGUE))
def test_every_catalogued_row_round_trips_through_its_label(label):
    row = CATALOGUE[label]
    assert row.label == label
    assert row_of(label, row.sent) == row


@pytest.mark.parametrize("residual", attention.RESIDUALS)
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("width", [None, 2, 16])
def test_every_transformer_row_round_trips_through_its_label(residual, tied, width):
    row = transformer(residual, 8, tied=tied, width=width)
    assert row_of(row.label, 8) == row
    assert (row.kind, row.tied, row.sent, row.is_model) == ("transformer", tied, 8, True)


def test_the_labels_are_those_compare_writes():
    assert transformer("belief", 64).label == "transformer (belief)"
    assert transformer("standard", 64, tied=True).label == "tied transformer (standard)"
    assert transformer("standard", 4, width=4).label == "transformer (standard, w=4)"
    assert per_round("pdmm").label == "pdmm (tuned per round)" and per_round("gossip").label == "gossip"


def test_numbers_sent_knows_the_fixed_rows_and_refuses_any_other_label(committed):
    fixed = {  # what a transformer row sends is its model's (the best transformer's: the widest trained)
        label: s
        for label, s in committed_sent().items()
        if row_of(label, s).kind != "transformer" and label != BEST_TRANSFORMER.label
    }
    assert {label: numbers_sent(label) for label in fixed} == fixed  # the committed seeds.csv is the reference
    assert numbers_sent("pdmm (tuned for round 32)") == 1
    for label in ("transformer (belief)", "pdmm (tuned per rounds)", "gossip (tuned for round 0)", "nothing", ""):
        with pytest.raises(ValueError, match=f"unknown row {re.escape(repr(label))}"):
            numbers_sent(label)


def test_every_committed_label_reads_back_as_the_row_compare_made(committed):
    sent = committed_sent()
    rows = {label: row_of(label, s) for label, s in sent.items()}
    assert {label: row.sent for label, row in rows.items()} == sent
    kinds = {label: row.kind for label, row in rows.items()}
    assert kinds["transformer (standard, w=4)"] == kinds["tied transformer (standard)"] == "transformer"
    assert rows["tied transformer (standard)"].tied and not rows["transformer (standard, w=4)"].tied
    assert rows["pdmm (tuned for round 32)"] == Row(
        "pdmm (tuned for round 32)", "classical", 1, method="pdmm", tuned="rho"
    )
    assert {label for label, kind in kinds.items() if kind == "bound"} == {
        "ball oracle",
        "bayes oracle (knows prior and s)",
        "best polynomial of W per graph (bound)",
    }
    diverging = {label for label, row in rows.items() if row.diverging}
    assert diverging == {"chebyshev (tuned per round)", "polynomial filter (fitted per round, unguarded)"}
    table, _ = committed
    assert table.rows == rows


@pytest.mark.parametrize(
    "label",
    ["gossip (tuned for round 32)", "transformer (standard, w=0)", "transformers (belief)", "pdmm", "", "m"],
)
def test_an_unknown_label_is_a_clear_error(label):
    with pytest.raises(ValueError, match=re.escape(f"unknown row {label!r}:")):
        row_of(label, 1)


def test_compare_from_a_directory_with_an_unknown_row_is_one_line(tmp_path, capsys):
    source = tmp_path / "source"
    shutil.copytree(COMMITTED, source, ignore=shutil.ignore_patterns("seeds"))
    text = (source / "seeds.csv").read_text()
    (source / "seeds.csv").write_text(text.replace("\ngossip,", "\ngossip (hand-edited),"))
    err = fails(capsys, ["compare", "--from", str(source), "--out", str(tmp_path / "again")])
    assert "seeds.csv" in err and "unknown row 'gossip (hand-edited)'" in err
    assert not (tmp_path / "again").exists()


def test_the_fitted_keys_are_the_ones_compare_json_holds():
    fitted = json.loads((COMMITTED / "compare.json").read_text())["fitted"]
    for values in fitted.values():
        tuned = [per_round(name) for name in TUNED if TUNED[name][2] is not None]
        assert (
            {row.fitted_key for row in tuned}
            == {
                "pdmm: rho per round",
                "averaged pdmm: rho per round",
                "admm: rho per round",
                "chebyshev: interval per round",
                "safe chebyshev: interval per round",
            }
            <= set(values)
        )
        assert per_round("gossip").fitted_key is None
        chosen = [row for row in CATALOGUE.values() if row.kind == "chosen"]
        assert len(chosen) == 4 and all(row.choice_key in values for row in chosen)
        assert all(row.fit_key in values for row in FITTED)
        for row in chosen:
            if row.chosen_from:  # what each seed took is one of the row's candidates
                assert set(values[row.choice_key].values()) <= set(row.chosen_from)


def test_the_families_pair_the_rows_the_report_names(committed):
    table, _ = committed
    K, R = table.depth, table.rounds
    transformers = [m for m in table.methods if m.startswith(("transformer", "tied transformer"))]
    widths = {m: table.sent[m] for m in transformers}
    assert sorted(widths.values()) == [2, 4, 8, 64, 64, 64]
    expected = [
        (m, r, table.sent[m] * r)
        for m in table.methods
        if m.startswith(("transformer", "tied transformer", "pdmm-transformer", "best transformer"))
        and table.sent[m] > 1
        for r in (1, K)
        if table.has(m, r) and table.has(BEST, table.sent[m] * r)
    ]
    assert equal_numbers(table) == expected and len(expected) > len(transformers)
    assert at_equal_numbers(table) == [(m, r, ref, c) for m, r, c in expected for ref in (BEST, SAFE)]
    tied = ["tied transformer (standard)"]
    assert tied_transformers(table) == tied
    pairs = at_equal_rounds(table)
    tied_at_r = {*tied, "pdmm-transformer (1 number, tied, topology mixture, depth curriculum)"}
    assert [p for p in pairs if p[1] == R] == [
        (m, R, ref, R) for m in table.methods if m in tied_at_r for ref in (BEST, SAFE)
    ]
    firsts = list(dict.fromkeys(p[0] for p in pairs if p[1] != R))
    assert firsts[:2] == [
        "best transformer (chosen on validation data)",
        "best one-number model (chosen on validation data)",
    ]
    assert firsts[2 : 2 + len(transformers)] == transformers and "pdmm-transformer (hand-set)" not in firsts
    assert firsts[-1] == "learned pdmm"
    oracles, family = against_oracles(table)
    assert oracles == ["ball oracle", "bayes oracle (knows prior and s)"]
    bounds = {"ball oracle", "bayes oracle (knows prior and s)", "best polynomial of W per graph (bound)"}
    assert len(family) == 2 * (len(table.methods) - 3) * len(table.sets)
    assert not {first for first, *_ in family} & bounds
    assert headline_methods(table) == {
        name: [
            "best polynomial of W per graph (bound)",
            BEST,
            SAFE,
            "chebyshev on fastest-mixing weights (whole graph offline)",
            "best transformer (chosen on validation data)",
            "best one-number model (chosen on validation data)",
            "pdmm (tuned per round)",
        ]
        for name in table.sets
    }
    claims = headline_comparisons(table)
    assert (("best transformer (chosen on validation data)", K, BEST, 64 * K, table.sets[0]) in claims) == table.has(
        BEST, 64 * K
    )
