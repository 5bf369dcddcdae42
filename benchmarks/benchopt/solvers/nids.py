"""NIDS (pdmm-bridge docs/decentralised.md section 4)."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "nids"
    method = "nids"
    parameters = {"alpha": ["auto"], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"alpha": self.alpha}
