"""bridge: PDMM and attention on one gather / fuse footing (MATH.md 2-5).

    model = bridge.UnrolledPDMM(layers=10, rho=1.0, learnable=True)
    iterates = model(pdmm.averaging(G, a))        # (K, n, d): x^1 .. x^K
"""
from .unrolled import UnrolledPDMM

__all__ = ["UnrolledPDMM"]
