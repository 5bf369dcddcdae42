"""scikit-learn's breast-cancer data (569 rows, 30 features; bundled, no download): standardised, an intercept
column, labels +-1."""

from benchopt import BaseDataset

from pdmm.datasets import breast_cancer_rows


class Dataset(BaseDataset):
    name = "breast_cancer"

    def get_data(self):
        X, y = breast_cancer_rows()
        return {"X": X, "y": y, "task": "classification"}
