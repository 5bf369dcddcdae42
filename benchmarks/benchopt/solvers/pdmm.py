"""PDMM (theta = 1) and averaged PDMM (theta = 1/2), pdmm-bridge docs/theory/pdmm.md."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "pdmm"
    method = "pdmm"
    parameters = {"rho": [1.0], "theta": [1.0, 0.5], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"rho": self.rho, "theta": self.theta}
