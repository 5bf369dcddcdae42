"""Decentralised gradient descent with a Metropolis mixing matrix (pdmm-bridge docs/decentralised.md section 2)."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "dgd"
    method = "dgd"
    parameters = {"alpha": ["auto"], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"alpha": self.alpha}
