"""Gradient tracking (pdmm-bridge docs/decentralised.md section 5)."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "gradient-tracking"
    method = "gradient-tracking"
    parameters = {"alpha": ["auto"], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"alpha": self.alpha}
