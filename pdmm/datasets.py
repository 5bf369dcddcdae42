"""Real data sets that ship inside installed libraries, as pdmm problems with rows split over the nodes.

    G = pdmm.topology("random_geometric", n=20, seed=0)
    problem = pdmm.datasets.breast_cancer(G)            # logistic regression, 569 rows over 20 nodes

`breast_cancer` reads scikit-learn's bundled copy of the Wisconsin diagnostic breast-cancer data
(`sklearn.datasets.load_breast_cancer`: a file inside the package, nothing is downloaded). scikit-learn is the
optional `sklearn` extra, imported at the first call (docs/guide/data.md).
"""

import numbers

import numpy as np

from .array_graph import node_count
from .problem import Problem, _weight, logistic

BREAST_CANCER_L2 = 10.0  # the l2 weight of the whole problem: scikit-learn's C = 1 / l2 = 0.1


def breast_cancer_rows() -> tuple[np.ndarray, np.ndarray]:
    """(X, y): the 569 rows of scikit-learn's breast-cancer data, standardised, with an intercept column.

    X is (569, 31): the 30 features, each shifted by its mean and divided by its standard deviation
    over all 569 rows (population standard deviation, ddof = 0; z-scores), then a column of ones.
    y is (569,) in {-1, +1}: +1 benign (357 rows), -1 malignant (212). ImportError, in one line naming the extra
    to install, where scikit-learn is not installed (docs/guide/data.md).
    """
    try:
        from sklearn.datasets import load_breast_cancer  # imported here: a plain `import pdmm` stays fast
    except ImportError:
        raise ImportError('the breast-cancer data needs scikit-learn: pip install "pdmm-bridge[sklearn]"') from None

    features, target = load_breast_cancer(return_X_y=True)
    scaled = (features - features.mean(0)) / features.std(0)
    return np.hstack([scaled, np.ones((len(scaled), 1))]), np.where(target == 1, 1.0, -1.0)


def split_rows(rows: int, nodes: int, seed: int = 0) -> list[np.ndarray]:
    """The row indices of each node: a permutation of range(rows) drawn from `seed`, cut into `nodes`
    consecutive parts of rows // nodes or rows // nodes + 1 indices (the longer parts first)."""
    for name, value, least in (("rows", rows, 1), ("nodes", nodes, 1)):
        if not (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= least):
            raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
    if nodes > rows:
        raise ValueError(f"cannot give each of {nodes} nodes a row of data with {rows} rows; use at most {rows} nodes")
    if not (isinstance(seed, numbers.Integral) and not isinstance(seed, bool)):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    return np.array_split(np.random.default_rng(seed).permutation(rows), nodes)


def node_arrays(X: np.ndarray, y: np.ndarray, parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(X_nodes (n, k, d), y_nodes (n, k)): node i holds the rows parts[i], k the longest part's length.

    A shorter part is padded with zero rows labelled +1: a zero row adds the constant log 2 to the
    logistic loss of its node and nothing to its gradient or curvature, so the minimiser and every
    method's iterates are those of the unpadded rows (only the objective is shifted).
    """
    k = max(len(part) for part in parts)
    X_nodes, y_nodes = np.zeros((len(parts), k, X.shape[1])), np.ones((len(parts), k))
    for i, part in enumerate(parts):
        X_nodes[i, : len(part)], y_nodes[i, : len(part)] = X[part], y[part]
    return X_nodes, y_nodes


def breast_cancer(graph, l2: float = BREAST_CANCER_L2, seed: int = 0) -> Problem:
    """Regularised logistic regression on the breast-cancer data, its rows split over the nodes of `graph`:

        minimise  sum_{r=1}^{569} log(1 + exp(-y_r a_r^T x)) + l2 / 2 ||x||^2,   x in R^31,

    a_r row r of breast_cancer_rows() (standardised features and an intercept, which is penalised like
    the weights). Node i of `graph` (a networkx graph, pdmm.Graph or scipy adjacency) holds the rows
    split_rows(569, n, seed)[i] and f_i = its logistic losses + (l2 / n) / 2 ||x||^2 (pdmm.logistic
    with reg = l2 / n), so the problem, and its solution, is the same whatever the graph. l2 > 0
    makes every f_i strongly convex; the default 10 is scikit-learn's C = 0.1 (docs/guide/data.md, on
    the choice). ValueError, in one line, for l2 <= 0 or a graph with more nodes than rows; ImportError, naming
    the extra to install, without scikit-learn.
    """
    if _weight("l2", l2) == 0:
        raise ValueError(
            "l2 must be > 0: without it the problem is not strongly convex (the data are nearly separable)"
        )
    X, y = breast_cancer_rows()
    n = node_count(graph)
    X_nodes, y_nodes = node_arrays(X, y, split_rows(len(X), n, seed))
    return logistic(graph, X_nodes, y_nodes, reg=l2 / n)


DATASETS = {"breast_cancer": ("logistic", breast_cancer)}  # name: (problem kind, constructor(graph, l2=, seed=))
