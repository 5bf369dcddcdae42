"""pdmm: batched PDMM, averaged PDMM, QA-PDMM and consensus ADMM on networkx graphs.

    G = pdmm.topology("random_geometric", n=100, seed=0)
    result = pdmm.solve(pdmm.averaging(G, a), method="pdmm", rho=1.0)
"""
from .compiled import CompiledGraph
from .graphs import TOPOLOGIES, load_graph, topology
from .local import Lasso, LocalFunction, Logistic, Quadratic
from .methods import METHODS
from .problem import Problem, averaging, lasso, least_squares, logistic, quadratic
from .reference import reference
from .solve import DivergenceError, Result, solve

__all__ = [
    "CompiledGraph", "TOPOLOGIES", "load_graph", "topology", "LocalFunction", "Quadratic", "Lasso", "Logistic",
    "METHODS", "Problem", "averaging", "lasso", "least_squares", "logistic", "quadratic", "reference",
    "DivergenceError", "Result", "solve",
]
