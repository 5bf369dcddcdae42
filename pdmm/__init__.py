"""pdmm: batched PDMM, averaged PDMM, QA-PDMM and consensus ADMM on networkx graphs; gossip and
Chebyshev-accelerated gossip for averaging (pdmm.mixing, docs/averaging.md); DGD, EXTRA / PG-EXTRA,
NIDS and gradient tracking for consensus problems (pdmm.decentralised, docs/decentralised.md); a rule that
tunes rho or the step size on a grid (pdmm.tune); real data as problems (pdmm.datasets).

    G = pdmm.topology("random_geometric", n=100, seed=0)
    result = pdmm.solve(pdmm.averaging(G, a), method="pdmm", rho=1.0)
    lossy = pdmm.solve(pdmm.averaging(G, a), network=pdmm.Network(drop=0.1, bits=8, dither=True))
    fast = pdmm.solve(pdmm.averaging(G, a), method="chebyshev", mixing="metropolis")
    baseline = pdmm.solve(pdmm.averaging(G, a), method="extra", alpha="auto")
    tuned = pdmm.tune(pdmm.datasets.breast_cancer(G), "nids", max_iter=3000)   # tuned.value: the alpha chosen
"""

from . import datasets
from .array_graph import Graph
from .edge_index import CompiledGraph
from .graph_files import load_graph
from .local import Lasso, LocalFunction, Logistic, Quadratic
from .loop import ConvergenceWarning, DivergenceError, Result, Snapshot
from .methods import METHODS
from .mixing import check_mixing, mixing_matrix, spectral_interval
from .network import Network
from .parts import PartProblem
from .problem import Problem, averaging, lasso, least_squares, logistic, quadratic
from .protocol import Capabilities, Method
from .reference import reference
from .settings import Engine, Recording, Stopping
from .solve import Plan, keep_freed_memory, plan, solve
from .topologies import TOPOLOGIES, topology
from .tuning import Tuning, tune

__all__ = [
    "CompiledGraph",
    "TOPOLOGIES",
    "load_graph",
    "topology",
    "LocalFunction",
    "Quadratic",
    "Lasso",
    "Logistic",
    "METHODS",
    "Network",
    "PartProblem",
    "Problem",
    "averaging",
    "lasso",
    "least_squares",
    "logistic",
    "quadratic",
    "reference",
    "ConvergenceWarning",
    "DivergenceError",
    "Result",
    "Snapshot",
    "solve",
    "plan",
    "Plan",
    "Stopping",
    "Recording",
    "Engine",
    "Capabilities",
    "Method",
    "keep_freed_memory",
    "Graph",
    "mixing_matrix",
    "check_mixing",
    "spectral_interval",
    "datasets",
    "Tuning",
    "tune",
]
