"""The objective: sum_i f_i(x_i) with x_i = x_j on every edge, the samples split over the nodes of a graph
(pdmm-bridge's docs/theory/problem.md sections 1 and 5)."""

from benchmark_utils import consensus_metrics, distributed_problem
from benchopt import BaseObjective


class Objective(BaseObjective):
    name = "decentralised"
    url = "https://github.com/pdmm-bridge/pdmm-bridge"
    requirements = ["pip:pdmm-bridge"]
    min_benchopt_version = "1.6"
    sampling_strategy = "callback"

    # loss: least squares (regression data) or logistic regression (classification data, labels +-1); graph:
    # a pdmm.topology kind on `nodes` nodes (seed 0); reg: the ridge weight of the whole problem
    parameters = {
        "loss": ["least_squares", "logistic"],
        "graph": ["random_geometric", "ring"],
        "nodes": [20],
        "reg": [1e-2],
    }

    def skip(self, X, y, task):
        wanted = "regression" if self.loss == "least_squares" else "classification"
        if task != wanted:
            return True, f"{self.loss} needs {wanted} data, {task} given"
        if len(y) < self.nodes:
            return True, f"{len(y)} samples cannot give each of {self.nodes} nodes one"
        return False, None

    def set_data(self, X, y, task):
        self.problem, self.x_star = distributed_problem(X, y, self.loss, self.graph, self.nodes, self.reg)

    def evaluate_result(self, x):
        return consensus_metrics(self.problem, self.x_star, x)

    def get_one_result(self):
        return {"x": 0 * self.x_star}

    def get_objective(self):
        return {"problem": self.problem}
