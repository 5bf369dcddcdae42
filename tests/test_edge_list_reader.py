"""The integer edge-list reader (pdmm.graph_files.integer_edge_list: numpy.loadtxt and a numbering table) against
the general reader (general_edge_list, which reads as networkx.read_edgelist does): the same labels, in the same
order, and the same edges, on generated files with comments, blank lines, extra fields, CRLF line ends, negative
labels, and the forms that must stay text ("07", "+7", "-0") or need the general reader (one-field lines)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pdmm
from pdmm.graph_files import general_edge_list, integer_edge_list, read_edge_list

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def same(got, expected):
    labels, src, dst = got
    assert labels == expected[0] and [type(x) for x in labels] == [type(x) for x in expected[0]]
    np.testing.assert_array_equal(src, expected[1])
    np.testing.assert_array_equal(dst, expected[2])


label = st.one_of(
    st.integers(-50, 400).map(str),
    st.sampled_from(["07", "+7", "-0", "00", "0", "-3", "12", "x"]),
)
line = st.one_of(
    st.tuples(label, label).map(" ".join),
    st.tuples(label, label, st.sampled_from(["{'w': 1}", "3", "# tail", "7 8"])).map(" ".join),
    st.sampled_from(["", "   ", "# a comment", "\t"]),
    label,  # one field: skipped by both
)


@SETTINGS
@given(lines=st.lists(line, max_size=30), end=st.sampled_from(["\n", "\r\n"]), tab=st.booleans())
def test_the_integer_reader_agrees_with_the_general_one(tmp_path, lines, end, tab):
    text = end.join(lines) + end
    path = tmp_path / "g.txt"
    path.write_bytes((text.replace(" ", "\t") if tab else text).encode())
    expected = general_edge_list(path)
    same(read_edge_list(path), expected)
    fast = integer_edge_list(path)
    if fast is not None:  # taken only where every label is a canonical int
        same(fast, expected)
        assert all(type(x) is int for x in fast[0])


number = st.integers(-(2**40), 2**40).map(str)
int_line = st.one_of(
    st.tuples(number, number).map(" ".join),
    st.tuples(number, number, st.sampled_from(["{'w': 1}", "3", "# tail", "x y"])).map(" ".join),
    st.sampled_from(["", "   ", "# a comment 07 +1"]),
)


@SETTINGS
@given(lines=st.lists(int_line, min_size=1, max_size=30), end=st.sampled_from(["\n", "\r\n"]))
def test_files_of_canonical_ints_take_the_integer_reader(tmp_path, lines, end):
    path = tmp_path / "g.txt"
    path.write_text(end.join(lines) + end, newline="")
    fast = integer_edge_list(path)
    if "07" in "".join(lines) or "+" in "".join(lines):  # in a comment: the scan is conservative
        return
    assert fast is not None
    same(fast, general_edge_list(path))


def test_canonical_ints_take_the_integer_reader_and_other_forms_do_not(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("# header\n10 2 {'w': 1}\n2 -3\r\n\n-3 10 # tail\n4 4\n")
    fast = integer_edge_list(path)
    assert fast is not None and fast[0] == [10, 2, -3, 4]
    assert fast[1].tolist() == [0, 1, 2, 3] and fast[2].tolist() == [1, 2, 0, 3]
    for text in ("07 1\n", "1 +7\n", "-0 1\n", "1 -07\n", "1 2\n3\n", "1 2\nx y\n", "1 2\r3 4\n", "1 2\n3 \xe4\n"):
        path.write_text(text)
        assert integer_edge_list(path) is None, text
        same(read_edge_list(path), general_edge_list(path))


def test_labels_spread_wide_are_numbered_by_sorting(tmp_path):
    path = tmp_path / "g.txt"
    path.write_text("1000000000000 5\n5 -99999999999\n-99999999999 1000000000000\n")  # range far beyond the edges
    fast = integer_edge_list(path)
    assert fast is not None and fast[0] == [1000000000000, 5, -99999999999]
    same(fast, general_edge_list(path))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"])
def test_an_edge_list_without_edges_reads_empty_and_is_refused(tmp_path, text):
    path = tmp_path / "g.txt"
    path.write_text(text)
    labels, src, dst = read_edge_list(path)
    assert labels == [] and len(src) == len(dst) == 0
    with pytest.raises(ValueError, match="holds no edges"):
        pdmm.load_graph(path)


def test_a_large_integer_edge_list_reads_as_the_general_reader_reads_it(tmp_path):
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 5000, size=(40_000, 2))
    path = tmp_path / "g.txt"
    with open(path, "w") as file:
        file.write("# generated\n")
        np.savetxt(file, pairs, fmt="%d")
    same(integer_edge_list(path), general_edge_list(path))
