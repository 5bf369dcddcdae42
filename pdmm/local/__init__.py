"""Local functions f_i: values, gradients, the PDMM x-update (prox) and smoothness constants."""

from .base import LocalFunction
from .lasso import Lasso
from .logistic import Logistic
from .quadratic import Quadratic

__all__ = ["LocalFunction", "Quadratic", "Lasso", "Logistic"]
