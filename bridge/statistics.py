"""The statistics of every comparison the project reports: Student t intervals, t-tests, Holm's correction and
the verdict rule (docs/theory/reproductions.md section 1).

With n values v_s (or n paired differences d_s = a_s - b_s), their mean m and standard deviation s (ddof 1),
the 95 % t interval is m -+ t_{0.975, n-1} s / sqrt(n) (t_interval). A ratio of geometric means over seeds
is the interval of the paired differences of log10 values, raised to the power of 10 (powers). The tests are
scipy's: ttest_rel for paired values, ttest_1samp for one sample; holm corrects the p-values of a family of
tests. A verdict names a direction only where the interval lies wholly on one side of "no difference" (side),
or where a corrected p is below its level with enough seeds (significant); everything else is undecided, which
the callers word as "not separable", "stalls" or "inconclusive".

Used by bridge.comparison (compare's cells, ratios and verdicts), experiments.claims and
experiments.repro_report (the reproductions' claims and tables) and experiments.network_sweep (paired
differences of iteration counts); no other module computes a t quantile or calls a scipy test.
"""

import math
from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

Side = Literal["below", "above", "contains"]


def t_interval(values: ArrayLike, confidence: float = 0.95) -> tuple[float, float, float]:
    """The mean of `values` and its Student t interval.

    m -+ t_{(1 + c) / 2, n - 1} s / sqrt(n), with m the mean, s the standard deviation (ddof 1) and c the
    confidence (docs/theory/reproductions.md section 1).

    Parameters
    ----------
    values : array_like
        The n values, e.g. one number per seed, or the paired differences of two methods.
    confidence : float
        The interval's coverage, 0.95 for a 95 % interval.

    Returns
    -------
    tuple of float
        (mean, low, high); low and high are NaN for fewer than two values or a non-finite one (a diverged
        run, +inf, has no interval). Values without spread give low = high = mean.
    """
    values = np.asarray(values, dtype=float)
    mean = float(values.mean())
    if len(values) < 2 or not np.all(np.isfinite(values)):
        return mean, math.nan, math.nan
    half = stats.t.ppf((1 + confidence) / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
    return mean, float(mean - half), float(mean + half)


def paired_interval(
    first: Sequence[float | None], second: Sequence[float | None], confidence: float = 0.95
) -> tuple[float, float, float] | None:
    """The mean of the paired differences first_s - second_s and its t interval (t_interval of the differences).

    Parameters
    ----------
    first, second : sequence of float or None
        One value per seed each, paired by position; None marks a missing value (e.g. a run that never
        reached its target).
    confidence : float
        The interval's coverage.

    Returns
    -------
    tuple of float or None
        (mean, low, high) of the differences; None when a value is missing or there are fewer than two pairs.
    """
    if len(first) < 2 or any(v is None for v in (*first, *second)):
        return None
    return t_interval(np.asarray(first, dtype=float) - np.asarray(second, dtype=float), confidence)


def powers(*logs: float) -> tuple[float, ...]:
    """10 ** each value, as floats: a mean of log10 values is a geometric mean, and the interval of a mean
    difference of log10 values that of a ratio of geometric means.

    Parameters
    ----------
    *logs : float
        log10 values (+inf for a diverged run).

    Returns
    -------
    tuple of float
        10 ** each value; inf for +inf or a value beyond float range, NaN for NaN.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return tuple(float(np.power(10.0, value)) for value in logs)


def ratio_interval(log_first: ArrayLike, log_second: ArrayLike, confidence: float = 0.95) -> tuple[float, float, float]:
    """The ratio of geometric means first / second over paired seeds and its t interval: powers of the t_interval
    of the paired differences of log10 values.

    Parameters
    ----------
    log_first, log_second : array_like
        log10 values of the two, one per seed, paired by position (+inf: a diverged run).
    confidence : float
        The interval's coverage.

    Returns
    -------
    tuple of float
        (ratio, low, high); below 1: `first` is the smaller. Two diverged runs (inf - inf) give NaN.
    """
    with np.errstate(invalid="ignore"):  # inf - inf: two diverged runs
        difference = np.asarray(log_first, dtype=float) - np.asarray(log_second, dtype=float)
    ratio, low, high = powers(*t_interval(difference, confidence))
    return ratio, low, high


def paired_p(first: ArrayLike, second: ArrayLike) -> float:
    """The two-sided p of the paired t-test of first against second (scipy.stats.ttest_rel).

    Parameters
    ----------
    first, second : array_like
        One value per seed each, paired by position.

    Returns
    -------
    float
        p; NaN for fewer than two pairs, a non-finite difference (a diverged run) or identical values.
    """
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    with np.errstate(invalid="ignore"):
        finite = bool(np.all(np.isfinite(a - b)))
    if len(a) > 1 and finite and np.any(a != b):
        return float(stats.ttest_rel(a, b).pvalue)
    return math.nan


def paired_test(values: ArrayLike, baseline: ArrayLike, confidence: float = 0.95) -> dict[str, float]:
    """The two-sided paired t-test of values - baseline (scipy.stats.ttest_rel) with the t interval of the mean
    difference (docs/theory/reproductions.md section 1).

    Parameters
    ----------
    values, baseline : array_like
        One value per seed each, paired by position.
    confidence : float
        The interval's coverage.

    Returns
    -------
    dict
        {"mean", "low", "high", "p", "n"}: the mean difference, its interval, p and the number of pairs; the
        interval and p are NaN below two pairs or where the differences have no spread.
    """
    a, b = np.asarray(values, dtype=float), np.asarray(baseline, dtype=float)
    return _summary(a - b, lambda: stats.ttest_rel(a, b).pvalue, confidence)


def one_sample_test(values: ArrayLike, confidence: float = 0.95) -> dict[str, float]:
    """The two-sided t-test of mean(values) = 0 (scipy.stats.ttest_1samp), summarised as paired_test's.

    Parameters
    ----------
    values : array_like
        One value per seed.
    confidence : float
        The interval's coverage.

    Returns
    -------
    dict
        {"mean", "low", "high", "p", "n"} as paired_test gives them.
    """
    values = np.asarray(values, dtype=float)
    return _summary(values, lambda: stats.ttest_1samp(values, 0.0).pvalue, confidence)


def _summary(differences: NDArray[np.float64], pvalue: Callable[[], float], confidence: float) -> dict[str, float]:
    """{mean, low, high, p, n} of `differences`; the interval and pvalue() only from two values with spread."""
    n = len(differences)
    summary = {"mean": float(differences.mean()) if n else math.nan, "low": math.nan, "high": math.nan, "p": math.nan}
    if n >= 2 and np.ptp(differences) > 0:
        _, low, high = t_interval(differences, confidence)
        summary.update(low=low, high=high, p=float(pvalue()))
    return {**summary, "n": n}


def holm(pvalues: ArrayLike) -> NDArray[np.float64]:
    """Holm-adjusted p-values of a family of tests (docs/theory/reproductions.md section 1).

    With the m finite p-values sorted, p_(1) <= ... <= p_(m), the k-th is adjusted to
    max_{j <= k} min(1, (m - j + 1) p_(j)).

    Parameters
    ----------
    pvalues : array_like
        The family's p-values, NaN for tests that could not be run.

    Returns
    -------
    numpy.ndarray
        The adjusted p-values in the input's order; NaN stays NaN and does not count in m.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[index]))
        adjusted[index] = running
    return adjusted


def side(low: float, high: float, null: float = 0.0) -> Side:
    """Where an interval lies relative to "no difference": the verdict rule of the intervals.

    Parameters
    ----------
    low, high : float
        The interval (NaN: no interval).
    null : float
        The value of no difference: 0 for a difference, 1 for a ratio.

    Returns
    -------
    str
        "below" when high < null, "above" when low > null, else "contains" (an interval that contains `null`,
        or NaN): only the first two may be called better or worse.
    """
    return "below" if high < null else "above" if low > null else "contains"


def significant(p: float, n: int, alpha: float = 0.05, min_n: int = 5) -> bool:
    """The verdict rule of the tests: whether a (corrected) p decides, p < alpha over at least min_n seeds.

    Parameters
    ----------
    p : float
        The test's p-value, Holm-corrected within its family (NaN never decides).
    n : int
        The number of seeds (pairs) the test used.
    alpha : float
        The level.
    min_n : int
        The fewest seeds that may decide.

    Returns
    -------
    bool
        True when n >= min_n and p < alpha; otherwise the verdict is inconclusive.
    """
    return n >= min_n and p < alpha
