"""EXTRA (pdmm-bridge docs/decentralised.md section 3)."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "extra"
    method = "extra"
    parameters = {"alpha": ["auto"], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"alpha": self.alpha}
