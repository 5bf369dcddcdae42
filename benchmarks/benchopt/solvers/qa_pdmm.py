"""QA-PDMM: PDMM with a quadratic approximation of each f_i (eta = "L": the local curvature), pdmm-bridge
docs/theory/qa_pdmm.md."""

from benchmark_utils import PdmmSolver


class Solver(PdmmSolver):
    name = "qa-pdmm"
    method = "qa-pdmm"
    parameters = {"rho": [1.0], "eta": ["L"], "drop": [0.0], "bits": [0]}

    def params(self):
        return {"rho": self.rho, "eta": self.eta}
