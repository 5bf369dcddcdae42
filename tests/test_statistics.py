"""bridge.statistics against scipy and closed forms, with negative controls, and the rule that it is the only module
that computes a t quantile or runs a t-test (the statistics exist once: issue 30)."""

import ast
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bridge.statistics import (
    holm,
    one_sample_test,
    paired_interval,
    paired_p,
    paired_test,
    powers,
    ratio_interval,
    side,
    significant,
    t_interval,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("pdmm", "attention", "bridge", "experiments")
SAMPLE = [0.91, 0.84, 0.88, 0.95, 0.80, 0.86]
BASE = [0.90, 0.80, 0.85, 0.93, 0.81, 0.82]


def test_t_interval_of_two_values_is_the_cauchy_closed_form():
    # n = 2: s = |a - b| / sqrt 2, so the half width is t_{0.975, 1} |a - b| / 2 with t_{q, 1} = tan(pi (q - 1/2))
    mean, low, high = t_interval([0.0, 2.0])
    half = math.tan(math.pi * 0.475) * 2.0 / 2
    assert mean == 1.0 and (low, high) == pytest.approx((1 - half, 1 + half), rel=1e-12)
    assert half == pytest.approx(12.706204736, rel=1e-9)  # the tabulated t quantile


def test_t_interval_by_hand_and_against_scipy():
    # 1, 3, 8: mean 4, s^2 = (9 + 1 + 16) / 2 = 13; two degrees of freedom: t_{q, 2} = (2q - 1) / sqrt(2 q (1 - q))
    mean, low, high = t_interval([1, 3, 8])
    t = (2 * 0.975 - 1) / math.sqrt(2 * 0.975 * 0.025)
    assert mean == 4 and (low, high) == pytest.approx((4 - t * math.sqrt(13 / 3), 4 + t * math.sqrt(13 / 3)), rel=1e-12)
    values = np.random.default_rng(0).normal(1, 2, size=7)
    for confidence in (0.9, 0.95, 0.99):
        expected = stats.t.interval(confidence, 6, loc=values.mean(), scale=stats.sem(values))
        assert t_interval(values, confidence)[1:] == pytest.approx(expected, rel=1e-12)


def test_t_interval_negative_control_a_normal_quantile_is_too_narrow():
    """The 1.96 z-rule differs from the t interval at 5 seeds by far more than the tolerance of the tests above."""
    values = np.array([0.2, 0.5, 0.1, 0.4, 0.3])
    mean, low, high = t_interval(values)
    z_half = 1.959963984540054 * values.std(ddof=1) / math.sqrt(5)
    assert (high - mean) / z_half == pytest.approx(stats.t.ppf(0.975, 4) / 1.959963984540054)
    assert (high - mean) > 1.4 * z_half


def test_t_interval_without_an_interval():
    assert t_interval([2.5])[0] == 2.5 and np.isnan(t_interval([2.5])[1:]).all()
    assert np.isnan(t_interval([1.0, np.inf])[1:]).all()  # a diverged run
    assert t_interval([3.0, 3.0, 3.0]) == (3.0, 3.0, 3.0)  # no spread: a point


def test_paired_interval_is_the_t_interval_of_the_differences_or_none():
    assert paired_interval([10, 12, 17], [9, 9, 9]) == t_interval([1, 3, 8])
    assert paired_interval([1, None, 3], [1, 2, 3]) is None
    assert paired_interval([1], [2]) is None


def test_ratio_interval_is_the_ratio_of_geometric_means():
    errors_a, errors_b = np.array([1e-3, 4e-3, 2e-3, 8e-4]), np.array([2e-3, 1e-2, 3e-3, 1e-3])
    ratio, low, high = ratio_interval(np.log10(errors_a), np.log10(errors_b))
    geometric = stats.gmean(errors_a) / stats.gmean(errors_b)
    assert ratio == pytest.approx(geometric, rel=1e-12) and low < ratio < high
    _, log_low, log_high = t_interval(np.log10(errors_a) - np.log10(errors_b))
    assert (low, high) == pytest.approx((10**log_low, 10**log_high), rel=1e-12)
    assert powers(math.inf, 0.0, math.nan)[:2] == (math.inf, 1.0)
    assert np.isnan(ratio_interval([math.inf, 1.0], [math.inf, 1.0])).all()  # inf - inf: two diverged runs


def test_paired_p_and_tests_match_scipy():
    assert paired_p(SAMPLE, BASE) == pytest.approx(stats.ttest_rel(SAMPLE, BASE).pvalue, rel=1e-12)
    assert 0.01 < paired_p(SAMPLE, BASE) < 0.05  # where a z-rule and a t-test could disagree
    assert all(math.isnan(paired_p(a, b)) for a, b in (([1.0], [2.0]), (BASE, BASE), ([1.0, math.inf], [0.0, 1.0])))
    test = paired_test(SAMPLE, BASE)
    reference = stats.ttest_rel(SAMPLE, BASE)
    assert test["p"] == pytest.approx(reference.pvalue, rel=1e-12) and test["n"] == 6
    assert (test["low"], test["high"]) == pytest.approx(tuple(reference.confidence_interval(0.95)), rel=1e-12)
    assert test["mean"] == pytest.approx(np.mean(np.subtract(SAMPLE, BASE)), rel=1e-12)
    one = one_sample_test(np.subtract(SAMPLE, BASE))
    reference = stats.ttest_1samp(np.subtract(SAMPLE, BASE), 0.0)
    assert one["p"] == pytest.approx(reference.pvalue, rel=1e-12)
    assert (one["low"], one["high"]) == pytest.approx(tuple(reference.confidence_interval(0.95)), rel=1e-12)


def test_tests_without_two_values_with_spread_have_no_p():
    for test in (paired_test([1.0], [0.5]), paired_test([1.0, 2.0], [0.0, 1.0]), one_sample_test([])):
        assert all(math.isnan(test[key]) for key in ("low", "high", "p"))
    assert paired_test([1.0], [0.5])["mean"] == 0.5 and one_sample_test([])["n"] == 0


def holm_by_definition(p):
    """Holm's step-down rule read straight off its definition: the k-th smallest of the m finite p-values is
    adjusted to max over j <= k of min(1, (m - j + 1) p_(j))."""
    finite = sorted((value, i) for i, value in enumerate(p) if not math.isnan(value))
    m = len(finite)
    out = [math.nan] * len(p)
    for k in range(m):
        out[finite[k][1]] = max(min(1.0, (m - j) * finite[j][0]) for j in range(k + 1))
    return out


def test_holm_on_a_hand_computed_example_and_against_its_definition():
    # sorted 0.01, 0.03, 0.04, 0.2 (m = 4): 4 x 0.01, 3 x 0.03, max(0.09, 2 x 0.04), max(0.09, 0.2)
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.2]), [0.04, 0.09, 0.09, 0.2])
    np.testing.assert_allclose(holm([0.5, np.nan, 0.01]), [0.5, np.nan, 0.02])  # NaN does not count in m
    np.testing.assert_allclose(holm([0.3, 0.6]), [0.6, 0.6])  # capped at 1 and monotone
    rng = np.random.default_rng(1)
    for size in range(1, 8):
        p = rng.uniform(0, 0.2, size)
        np.testing.assert_allclose(holm(p), holm_by_definition(list(p)), rtol=1e-15)


def test_holm_negative_control_it_is_not_bonferroni():
    bonferroni = np.minimum(1, 4 * np.array([0.01, 0.04, 0.03, 0.2]))
    assert not np.allclose(holm([0.01, 0.04, 0.03, 0.2]), bonferroni)


def test_the_verdict_rules():
    assert side(-0.3, -0.1) == "below" and side(0.1, 0.3) == "above" and side(-0.1, 0.1) == "contains"
    assert side(0.5, 0.9, null=1.0) == "below" and side(0.9, 1.1, null=1.0) == "contains"
    assert side(math.nan, math.nan) == "contains"  # no interval decides nothing
    assert side(0.0, 0.2) == "contains"  # an interval touching no difference does not exclude it
    assert significant(0.01, 5) and not significant(0.01, 4) and not significant(0.05, 10)
    assert not significant(math.nan, 10) and significant(0.04, 3, alpha=0.05, min_n=3)
    test = paired_test(SAMPLE, BASE)
    assert side(test["low"], test["high"]) == "above" and significant(test["p"], test["n"])
    shuffled = paired_test(SAMPLE, BASE[::-1])  # negative control: pairing broken, no verdict
    assert side(shuffled["low"], shuffled["high"]) == "contains" and not significant(shuffled["p"], shuffled["n"])


FORBIDDEN_CALLS = ("t.ppf", "t.interval", "ttest_rel", "ttest_1samp", "ttest_ind")


def _dotted(node):
    """'a.b.c' of a Name / Attribute chain, '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def statistics_uses(source):
    """The t quantiles, t-tests and scipy.stats imports a module's source makes, as 'line: what' strings."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if any(name == call or name.endswith(f".{call}") for call in FORBIDDEN_CALLS):
                found.append(f"{node.lineno}: {name}()")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("scipy.stats")]
        elif isinstance(node, ast.ImportFrom) and (
            (node.module or "").startswith("scipy.stats")
            or node.module == "scipy"
            and any(a.name == "stats" for a in node.names)
        ):
            found.append(f"{node.lineno}: from {node.module} import ...")
    return found


def test_only_bridge_statistics_computes_t_quantiles_and_t_tests():
    files = itertools.chain.from_iterable((ROOT / package).rglob("*.py") for package in PACKAGES)
    uses = {str(path.relative_to(ROOT)): statistics_uses(path.read_text()) for path in files}
    own = uses.pop("bridge/statistics.py")
    assert len(own) >= 4, own  # the reader sees the module's own import, quantile and tests
    assert not any(uses.values()), {path: found for path, found in uses.items() if found}


def test_the_statistics_reader_catches_each_form():
    """Negative control: every way of reaching a t quantile or a t-test is found, a mention in text is not."""
    source = (
        "import scipy.stats\nfrom scipy import stats\nfrom scipy.stats import t\n"
        "q = stats.t.ppf(0.975, 4)\nscipy.stats.ttest_rel(a, b)\nt.interval(0.95, 4)\nttest_1samp(x, 0)\n"
        "text = 'paired t-test (scipy.stats.ttest_rel)'\n"
    )
    assert [line.split(":")[0] for line in statistics_uses(source)] == ["1", "2", "3", "4", "5", "6", "7"]
