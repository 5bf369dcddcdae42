"""The one-pass GraphML reader (pdmm.graph_files.graphml_edges) against networkx.read_graphml then
pdmm.Graph.from_networkx: the same nodes in the same order and the same edges, on files networkx writes and on
hand-written ones; what it does not read plainly goes to networkx, and a DOCTYPE is refused by both paths."""

import networkx as nx
import numpy as np
import pytest

import pdmm
from pdmm.graph_files import graphml_edges

HEAD = '<?xml version="1.0" encoding="utf-8"?>\n<graphml xmlns="http://graphml.graphdrawing.org/xmlns">\n'


def by_networkx(path):
    return pdmm.Graph.from_networkx(nx.Graph(nx.read_graphml(path)))


def same(path):
    fast, slow = pdmm.load_graph(path, arrays=True), by_networkx(path)
    assert graphml_edges(path) is not None  # the one-pass reader took it
    assert list(fast.nodes) == list(slow.nodes) and fast.n == slow.n
    np.testing.assert_array_equal(fast.edges, slow.edges)


@pytest.mark.parametrize("directed", [False, True])
def test_files_networkx_writes_read_the_same(tmp_path, directed):
    G = nx.gnm_random_graph(300, 900, seed=1, directed=directed)
    G = nx.relabel_nodes(G, {v: f"n{(v * 7919) % 300}" for v in G})  # ids out of order
    nx.set_node_attributes(G, {v: float(k) for k, v in enumerate(G)}, "weight")
    nx.set_edge_attributes(G, 2.5, "capacity")
    path = tmp_path / "g.graphml"
    nx.write_graphml(G, path)
    same(path)


def test_undeclared_ends_repeats_loops_and_other_namespaces(tmp_path):
    path = tmp_path / "g.graphml"
    path.write_text(
        HEAD + '<key id="d0" for="node" attr.name="x" attr.type="double"/>\n'
        '<graph edgedefault="undirected" xmlns:y="http://www.yworks.com/xml/graphml">\n'
        '<edge source="c" target="a"/><node id="b"><data key="d0">1.5</data><y:node id="zzz"/></node>\n'
        '<node id="a"/><edge source="a" target="b"/><edge source="b" target="a"/><edge source="d" target="d"/>\n'
        '<edge source="b" target="e"/>\n</graph>\n</graphml>\n'
    )
    with pytest.warns(UserWarning, match="1 self-loop"):
        fast = pdmm.load_graph(path, arrays=True)
    assert list(fast.nodes) == ["b", "a", "c", "d", "e"]  # declared first, then undeclared ends in edge order
    with pytest.warns(UserWarning, match="1 self-loop"):
        slow = by_networkx(path)
    assert list(slow.nodes) == list(fast.nodes)
    np.testing.assert_array_equal(fast.edges, slow.edges)


@pytest.mark.parametrize(
    "body",
    [
        '<graph edgedefault="undirected"><node id="a"><graph id="g2"><node id="a::b"/></graph></node>'
        '<node id="c"/><edge source="a" target="c"/></graph>',
        '<graph edgedefault="undirected"><node id="a"/><node id="b"/><edge source="a" target="b"/></graph>'
        '<graph edgedefault="undirected"><node id="c"/></graph>',
        '<graph edgedefault="undirected"><node id="a"><port name="p"/></node><node id="b"/>'
        '<edge source="a" target="b"/></graph>',
    ],
    ids=["nested graph", "two graphs", "ports"],
)
def test_what_networkx_reads_otherwise_goes_to_networkx(tmp_path, body):
    path = tmp_path / "g.graphml"
    path.write_text(HEAD + body + "</graphml>\n")
    assert graphml_edges(path) is None
    graph = pdmm.load_graph(path, arrays=True)
    assert list(graph.nodes) == list(by_networkx(path).nodes)


def test_hyperedges_and_doctypes_are_refused_as_before(tmp_path):
    path = tmp_path / "g.graphml"
    path.write_text(
        HEAD + '<graph edgedefault="undirected"><node id="a"/><node id="b"/><node id="c"/>'
        '<hyperedge><endpoint node="a"/><endpoint node="b"/><endpoint node="c"/></hyperedge></graph></graphml>\n'
    )
    with pytest.raises(ValueError, match="could not read graph file"):
        pdmm.load_graph(path, arrays=True)
    doctype = tmp_path / "d.graphml"
    declared = '<?xml version="1.0"?>\n<!DOCTYPE graphml [<!ENTITY x "y">]>\n' + HEAD.split("\n", 1)[1]
    doctype.write_text(declared + '<graph edgedefault="undirected"><node id="a"/></graph></graphml>\n')
    for arrays in (True, False):
        with pytest.raises(ValueError, match="declares a DOCTYPE"):
            pdmm.load_graph(doctype, arrays=arrays)
