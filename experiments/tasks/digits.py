"""digits: scikit-learn's bundled 8 x 8 handwritten digits (1797 images), classified by a ViT."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

import attention

from ..config import attention_config
from ..errors import UsageError
from .base import Task, classification_metrics, sample_rows


@dataclass
class DigitsOptions:
    val_fraction: float = 0.2  # stratified by class
    patch_size: int = 2  # 2 x 2 patches: 16 patch tokens + the class token


class Digits(Task):
    name = "digits"
    Options = DigitsOptions
    metrics = ("val_loss", "val_acc", "train_acc")

    @classmethod
    def check(cls, config):
        """The options (Task.check): val_fraction in (0, 1), a patch_size that divides 8."""
        options = super().check(config)
        if not 0 < options.val_fraction < 1:
            raise UsageError(f"task.val_fraction must be in (0, 1), got {options.val_fraction}")
        if options.patch_size < 1 or 8 % options.patch_size:
            raise UsageError(f"task.patch_size must divide 8, got {options.patch_size}")
        return options

    def __init__(self, config):
        super().__init__(config)
        try:  # imported here: the CLI starts faster without scikit-learn, an optional extra
            from sklearn.datasets import load_digits
            from sklearn.model_selection import train_test_split
        except ImportError:
            raise UsageError('task digits needs scikit-learn: pip install "pdmm-bridge[sklearn]"') from None
        digits = load_digits()
        images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
        labels = torch.tensor(digits.target)
        try:
            train, val = train_test_split(
                range(len(labels)),
                test_size=self.options.val_fraction,
                stratify=digits.target,
                random_state=config.train.seed,
            )
        except ValueError as err:  # e.g. fewer validation images than classes
            raise UsageError(f"task.val_fraction {self.options.val_fraction}: {err}") from None
        self.splits = {"train": (images[train], labels[train]), "val": (images[val], labels[val])}

    def build_model(self):
        return attention.ViT(
            attention_config(self.config.model),
            self.config.model.n_layer,
            image_size=8,
            patch_size=self.options.patch_size,
            channels=1,
            num_classes=10,
        )

    def train_batch(self, generator):
        images, labels = self.splits["train"]
        rows = sample_rows(len(labels), self.config.train.batch_size, generator)
        return images[rows], labels[rows]

    def loss(self, model, batch):
        logits, _ = model(batch[0])
        return F.cross_entropy(logits, batch[1]), logits

    def evaluate(self, model, generator, device):
        metrics = classification_metrics(self, model, self.splits, device)
        return {"val_loss": metrics["val_loss"], "val_acc": metrics["val_acc"], "train_acc": metrics["train_acc"]}
