"""The Examples sections of the API's main entries run as written: each of EXAMPLES has a numpydoc "Examples"
section, and its doctests pass as doctest runs them by default (an example that needs ELLIPSIS says so in a
`# doctest: +ELLIPSIS` directive). A test here fails for an entry without the section or with fewer than two
doctests in it, not only for a wrong output."""

import doctest
import inspect
import re

import pytest

import attention
import pdmm

EXAMPLES = {
    "pdmm.solve": pdmm.solve,
    "pdmm.tune": pdmm.tune,
    "pdmm.Network": pdmm.Network,
    "pdmm.averaging": pdmm.averaging,
    "pdmm.lasso": pdmm.lasso,
    "attention.MultiHeadAttention": attention.MultiHeadAttention,
    "attention.TokenGraph": attention.TokenGraph,
}
SECTION = re.compile(r"^Examples\n-{8,}\n(.*?)(?=^\S[^\n]*\n-{3,}\n|\Z)", re.S | re.M)  # to the next section


def examples_section(obj):
    """The text of obj's numpydoc Examples section (its own docstring, dedented), or None without one."""
    match = SECTION.search(inspect.getdoc(obj) or "")
    return None if match is None else match[1]


def run_examples(name, text, where=None):
    """(doctests run, failures, the runner's report) for the doctests in `text` (from the source file `where`), in
    a fresh namespace."""
    test = doctest.DocTestParser().get_doctest(text, {}, name, where, 0)
    runner = doctest.DocTestRunner()
    report: list[str] = []
    runner.run(test, out=report.append)
    return len(test.examples), runner.failures, "".join(report)


@pytest.mark.parametrize("name", EXAMPLES)
def test_the_examples_section_runs_as_written(name):
    text = examples_section(EXAMPLES[name])
    assert text is not None, f"{name} has no Examples section"
    count, failures, report = run_examples(name, text, inspect.getsourcefile(EXAMPLES[name]))
    assert count >= 2, f"{name}'s Examples section has {count} doctests"
    assert failures == 0, report


def test_the_check_catches_a_missing_section_and_a_wrong_output():
    """Negative control: an entry without an Examples section, and one whose example prints something else."""

    def silent() -> None:
        """Nothing to show.

        Returns
        -------
        None
        """

    def wrong() -> None:
        """A wrong output.

        Examples
        --------
        >>> 1 + 1
        3
        >>> 2 * 2
        4
        """

    assert examples_section(silent) is None
    count, failures, report = run_examples("wrong", examples_section(wrong))
    assert (count, failures) == (2, 1) and "Expected:\n    3\nGot:\n    2" in report
