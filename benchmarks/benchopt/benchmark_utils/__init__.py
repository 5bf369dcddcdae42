"""What the objective, datasets and solvers share: the distributed problem, its metrics and a solver base class
that runs pdmm.solve under benchopt's callback sampling."""

import numpy as np
import torch
from benchopt import BaseSolver

import pdmm
from pdmm.datasets import node_arrays, split_rows


def distributed_problem(X, y, loss, graph, nodes, reg):
    """(the pdmm.Problem, x* (n, d)): the rows of (X, y) split over the nodes of pdmm.topology(graph, nodes),
    least squares 1/2 ||H_i x - y_i||^2 or logistic regression, each node with reg / nodes of the ridge, and the
    centralised solution (pdmm.reference)."""
    G = pdmm.topology(graph, n=nodes, seed=0)
    H, targets = node_arrays(X, y, split_rows(len(y), nodes, seed=0))
    if loss == "least_squares":
        problem = pdmm.least_squares(G, H, targets, ridge=reg / nodes)
    else:
        problem = pdmm.logistic(G, H, targets, reg=reg / nodes)
    return problem, pdmm.reference(problem)


def consensus_metrics(problem, x_star, x):
    """value: the objective sum_i f_i at the nodes' average x_bar (benchopt's main curve); consensus: the RMS over
    the nodes of ||x_i - x_bar||; error: ||x - x*||_F / ||x*||_F."""
    x = np.asarray(x, dtype=np.float64)
    average = np.broadcast_to(x.mean(0), x.shape)
    value = float(problem.local.value(torch.from_numpy(np.ascontiguousarray(average))[:, None, :])[0])
    return {
        "value": value,
        "consensus": float(np.sqrt(((x - average) ** 2).sum(1).mean())),
        "error": float(np.linalg.norm(x - x_star) / np.linalg.norm(x_star)),
    }


class PdmmSolver(BaseSolver):
    """A method of pdmm.solve (`method`), its parameters `params()` from the solver's own, over a simulated
    network with `drop` (the chance a message is lost) and `bits` (quantised messages, 0 for none) where they
    are not 0. Every iteration is shown to benchopt's callback through pdmm.solve's callback; the method runs
    until benchopt stops it."""

    sampling_strategy = "callback"
    requirements = ["pip:pdmm-bridge"]
    method = ""
    max_iter = 10**6

    def params(self):
        return {}

    def set_objective(self, problem):
        self.problem = problem
        self.x = np.zeros((problem.n, problem.dim))

    def network(self):
        drop, bits = getattr(self, "drop", 0.0), getattr(self, "bits", 0)
        return pdmm.Network(drop=drop, bits=bits or None, seed=0) if drop or bits else None

    def run(self, callback):
        self.x = np.zeros((self.problem.n, self.problem.dim))
        if not callback():  # x^0 = 0, the first point of every curve
            return

        def watch(snapshot):
            self.x = snapshot.x
            return not callback()

        try:
            pdmm.solve(
                self.problem,
                method=self.method,
                max_iter=self.max_iter,
                tol=0,
                record_every=1,
                history=(),
                network=self.network(),
                callback=watch,
                **self.params(),
            )
        except pdmm.DivergenceError:  # the curve so far shows it; benchopt marks the run diverged
            pass

    def get_result(self):
        return {"x": self.x}
