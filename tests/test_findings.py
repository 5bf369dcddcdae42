"""bridge.findings and CompareTable.verdicts: the headline claims are one declared family, Holm-adjusted together;
a claim is "better" / "worse" only at an adjusted p below 0.05 over at least 5 seeds, and its sentence names the
rows, rounds, ratio, interval and both p-values."""

import re
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from bridge.comparison import (
    BEST,
    BEST_ONE_NUMBER,
    BEST_SAFE,
    BEST_TRANSFORMER,
    FASTEST,
    CompareTable,
)
from bridge.comparison.pairing import headline_comparisons
from bridge.findings import findings
from bridge.statistics import holm

SEEDS = [0, 1, 2, 3, 4]
K, R, W = 2, 4, 8  # depth, rounds, the best transformer's numbers per edge and round


def table(shift_transformer, shift_one_number, seeds=SEEDS, noise=0.02):
    """A comparison on one set whose best transformer and best one-number model sit `shift` log10 units from the
    best classical row, with paired noise; the classical rows reach round W K."""
    rng = np.random.default_rng(7)
    n, horizon = len(seeds), W * K
    base = -np.linspace(0.2, 3, horizon)[None, :] + rng.normal(0, 0.05, (n, horizon))
    log_errors = {
        (BEST.label, "s"): base,
        (BEST_SAFE.label, "s"): base + 0.1,
        (FASTEST.label, "s"): np.where(
            np.arange(horizon) < R, base - 0.01 + rng.normal(0, noise, (n, horizon)), np.nan
        ),
    }
    for method, shift in ((BEST_TRANSFORMER, shift_transformer), (BEST_ONE_NUMBER, shift_one_number)):
        values = base + shift + rng.normal(0, noise, (n, horizon))
        values[:, R:] = np.nan
        log_errors[(method.label, "s")] = values
    fitted = {
        s: {m.choice_key: {r: f"row {m.label[:4]}" for r in range(1, horizon + 1)} for m in (BEST, BEST_SAFE)}
        for s in seeds
    }
    for s in seeds:
        fitted[s][BEST_TRANSFORMER.choice_key] = {r: "transformer (belief)" for r in range(1, R + 1)}
    rows = (BEST, BEST_SAFE, FASTEST, replace(BEST_TRANSFORMER, sent=W), BEST_ONE_NUMBER)
    return CompareTable(list(seeds), R, K, log_errors, {row.label: row for row in rows}, fitted)


def test_the_headline_family_is_declared_from_the_rows_not_from_their_results():
    claims = headline_comparisons(table(-0.3, 0.3))
    assert claims == headline_comparisons(table(0.3, -0.3))  # the same tests whatever the numbers
    expected = {(BEST_TRANSFORMER.label, r, ref, r, "s") for r in (K, R) for ref in (BEST.label, BEST_SAFE.label)}
    expected |= {(BEST_ONE_NUMBER.label, r, ref, r, "s") for r in (K, R) for ref in (BEST.label, BEST_SAFE.label)}
    expected |= {(BEST_TRANSFORMER.label, K, BEST.label, W * K, "s")}  # equal numbers sent: W K classical rounds
    expected |= {(FASTEST.label, r, ref, r, "s") for r in (K, R) for ref in (BEST.label, BEST_SAFE.label)}
    assert set(claims) == expected and len(claims) == len(expected)


def test_every_claim_is_holm_adjusted_over_the_family_and_worded_by_the_adjusted_p():
    t = table(-0.05, 0.0, noise=0.04)
    verdicts = t.verdicts(headline_comparisons(t))
    raw = []
    for v in verdicts:
        a = t.log_errors[(v.first, v.set)][:, v.round - 1]
        b = t.log_errors[(v.second, v.set)][:, v.round_second - 1]
        raw.append(stats.ttest_rel(a, b).pvalue)
        assert v.p == pytest.approx(raw[-1], rel=1e-12)
        assert np.log10(v.ratio) == pytest.approx((a - b).mean(), rel=1e-9)
    np.testing.assert_allclose([v.p_holm for v in verdicts], holm(raw), rtol=1e-12)
    for v in verdicts:
        if v.p_holm >= 0.05:
            assert v.word == "not separable"
        else:
            assert v.word == ("better" if v.ratio < 1 else "worse")
    # a claim significant alone but not after Holm's adjustment is not called
    assert any(p < 0.05 <= q for p, q in zip(raw, (v.p_holm for v in verdicts), strict=True)), "no such case here"
    assert all(v.word == "not separable" for p, v in zip(raw, verdicts, strict=True) if v.p_holm >= 0.05 > p)


def test_a_clear_difference_is_called_and_fewer_than_five_seeds_never_are():
    t = table(-0.5, 0.5)
    words = {(v.first, v.round, v.second, v.round_second): v.word for v in t.verdicts(headline_comparisons(t))}
    assert words[(BEST_TRANSFORMER.label, K, BEST.label, K)] == "better"
    assert words[(BEST_ONE_NUMBER.label, R, BEST_SAFE.label, R)] == "worse"
    few = table(-0.5, 0.5, seeds=[0, 1, 2, 3])
    assert {v.word for v in few.verdicts(headline_comparisons(few))} == {"not separable"}


def test_the_findings_name_rows_rounds_ratios_and_both_p_values():
    t = table(-0.5, 0.5)
    text = "\n".join(findings(t))
    verdicts = t.verdicts(headline_comparisons(t))
    assert f"all {len(verdicts)} claims" in text
    for v in verdicts:
        assert f"{v.ratio:.3g}x [{v.low:.2g}, {v.high:.2g}], p {v.p:.2g}, Holm p {v.p_holm:.2g}: **{v.word}**" in text
    line = next(x for x in text.splitlines() if f"| {BEST_TRANSFORMER.label}" in x and "equal numbers" in x)
    assert f"[{W} numbers; transformer (belief) on 5 seeds]" in line and f"| after {W * K}: " in line
    assert re.search(rf"\| {K} rounds, equal numbers sent \({W * K} per edge\) \|", line)
    assert "(row best on 5 seeds)" in text  # which row the best classical row took, per seed
