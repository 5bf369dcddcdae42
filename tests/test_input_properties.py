"""Property-based (hypothesis): every --set override of a built-in config and every solve command line ends in
success or in one error line with exit 2, never a traceback (issue 29, item 6). Bounded: few examples, tiny
problems, so the file runs in seconds."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.cli import main
from experiments.config import TABLES, builtin_configs, load_config, table_keys
from experiments.errors import UsageError
from experiments.memory import check_memory

KEYS = [f"{table}.{name}" for table in TABLES if table != "task" for name in table_keys(table)]
TEXTS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "true",
            "false",
            '"x"',
            "nan",
            "inf",
            "-inf",
            "1e308",
            "[1, 2]",
            "{a = 1}",
            "",
            "cuda:99",
            "meta",
            "standard",
            "belief",
            "mean",
            "convex",
        ]
    ),
    st.text(max_size=8),
)
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(name=st.sampled_from(sorted(builtin_configs())), key=st.sampled_from(KEYS), value=TEXTS)
def test_a_config_override_is_accepted_or_refused_as_a_usage_error(name, key, value):
    try:
        check_memory(load_config(name, [f"{key}={value}"]))
    except UsageError as err:
        assert str(err) and "\n" not in str(err)


NUMBERS = st.one_of(
    st.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e400", "1e-300", "abc", "", str(2**64)]),
    st.floats(min_value=-1e20, max_value=1e20).map(repr),
    st.integers(min_value=-(2**65), max_value=2**65).map(str),
)
OPTIONS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "--tol",
                "--seed",
                "--rho",
                "--theta",
                "--wake",
                "--drop",
                "--edge-up",
                "--nodes",
                "--iters",
                "--dim",
                "--bits",
            ]
        ),
        NUMBERS,
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda option: option[0],
)


@FAST
@given(
    options=OPTIONS,
    method=st.sampled_from(["pdmm", "admm", "qa-pdmm", "extra", "gossip", "pdmm:theta=0.5"]),
    dtype=st.sampled_from(["float64", "float32"]),
)
def test_a_solve_command_line_succeeds_or_fails_in_one_line_with_exit_2(
    tmp_path_factory, capsys, options, method, dtype
):
    flags = dict(options)
    if _too_big(flags):
        return  # tiny problems only: a 10^20-node graph is a different test (the memory check)
    argv = [
        "solve",
        "--no-progress",
        "--reference",
        "none",
        "--method",
        method,
        "--dtype",
        dtype,
        *[word for option in flags.items() for word in option],
        "--out",
        str(tmp_path_factory.mktemp("run") / "o"),
    ]
    argv += [] if "--nodes" in flags else ["--nodes", "8"]
    argv += [] if "--iters" in flags else ["--iters", "20"]
    try:
        code = main(argv)
    except SystemExit as exit:
        code = exit.code
    err = capsys.readouterr().err
    assert code in (0, 1, 2), err
    if code == 2:
        lines = [line for line in err.splitlines() if line.strip() and "warning" not in line]
        assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in err, err


def _too_big(flags):
    """Whether the line asks for more than a tiny run (many nodes, iterations or dimensions)."""
    for flag, limit in (("--nodes", 40), ("--iters", 200), ("--dim", 8)):
        try:
            if flag in flags and float(flags[flag]) > limit and math.isfinite(float(flags[flag])):
                return True
        except ValueError:
            pass
    return False
