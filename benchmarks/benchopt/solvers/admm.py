"""Consensus ADMM on the edges (pdmm-bridge docs/decentralised.md)."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "admm"
    method = "admm"
    parameters = {"rho": [1.0], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"rho": self.rho}
