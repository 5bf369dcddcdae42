"""scikit-learn's diabetes data (442 rows, 10 features; bundled, no download): standardised features and target,
an intercept column."""

import numpy as np
from benchopt import BaseDataset
from sklearn.datasets import load_diabetes
from sklearn.preprocessing import StandardScaler


class Dataset(BaseDataset):
    name = "diabetes"

    def get_data(self):
        features, target = load_diabetes(return_X_y=True)
        X = np.hstack([StandardScaler().fit_transform(features), np.ones((len(target), 1))])
        return {"X": X, "y": (target - target.mean()) / target.std(), "task": "regression"}
