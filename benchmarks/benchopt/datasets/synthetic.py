"""Gaussian features and a linear model: y = X w + noise (regression) or sign(X w + noise) (classification)."""

import numpy as np
from benchopt import BaseDataset


class Dataset(BaseDataset):
    name = "synthetic"
    parameters = {"task": ["regression", "classification"], "n_samples": [200], "n_features": [5], "seed": [0]}

    def get_data(self):
        rng = np.random.default_rng(self.seed)
        X = rng.normal(size=(self.n_samples, self.n_features))
        y = X @ rng.normal(size=self.n_features) + 0.5 * rng.normal(size=self.n_samples)
        return {"X": X, "y": y if self.task == "regression" else np.where(y > 0, 1.0, -1.0), "task": self.task}
