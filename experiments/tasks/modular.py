"""modular: predict (a op b) mod p from the tokens [a, op, b, =] (the grokking setup).

model.kind = "transformer" trains attention.GPT and reads its prediction after "="; model.kind =
"convex" trains attention.ConvexTokenClassifier (docs/theory/convex.md section 8) over fixed random
embeddings of the four tokens (the convexity check); model.kind = "convex_blocks" trains
attention.ConvexTransformer, model.n_layer blocks of convex attention + FCN over trained embeddings
(the source's grokking model). Both convex kinds take model.gates gates and add the group-lasso
weight model.group_lasso times the penalty to the training loss.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

import attention

from ..config import attention_config
from ..errors import UsageError
from .base import Task, classification_metrics, sample_rows

OPERATIONS = ("+", "-", "*", "/")
PAIR_BYTES = 128  # the most memory one (a, b) pair takes while the task is built (about 105 bytes measured)


@dataclass
class ModularOptions:
    p: int = 97
    op: str = "+"
    train_fraction: float = 0.5


def is_prime(p):
    return p >= 2 and all(p % k for k in range(2, int(p**0.5) + 1))


def pair_count(options: ModularOptions) -> int:
    """How many (a, b) pairs the task holds: p^2, or p (p - 1) for "/" (no b = 0)."""
    return options.p * (options.p - 1 if options.op == "/" else options.p)


class Modular(Task):
    name = "modular"
    Options = ModularOptions
    metrics = ("val_loss", "val_acc", "train_acc")

    @classmethod
    def check(cls, config):
        """The options (Task.check): op one of OPERATIONS, p >= 2 (a prime for "/"), a train_fraction in (0, 1)
        that leaves both splits non-empty."""
        options = super().check(config)
        p, op = options.p, options.op
        if op not in OPERATIONS:
            raise UsageError(f"task.op must be one of {', '.join(OPERATIONS)}, got {op!r}")
        if p < 2 or (op == "/" and not is_prime(p)):
            raise UsageError(f"task.p must be {'a prime' if op == '/' else 'at least 2'} for op {op!r}, got {p}")
        if not 0 < options.train_fraction < 1:
            raise UsageError(f"task.train_fraction must be in (0, 1), got {options.train_fraction}")
        pairs = pair_count(options)
        if not 1 <= int(round(options.train_fraction * pairs)) < pairs:
            raise UsageError(
                f"task.train_fraction {options.train_fraction} of {pairs} pairs leaves an empty "
                "split; choose a fraction that keeps both splits non-empty"
            )
        return options

    @classmethod
    def data_parts(cls, config, options):
        """The pair table: a, b, the answers, the token rows, the shuffle and the splits, PAIR_BYTES a pair."""
        return {f"task.p={options.p}: the table of its {pair_count(options):,} pairs": PAIR_BYTES * pair_count(options)}

    def __init__(self, config):
        super().__init__(config)
        p, op = self.options.p, self.options.op
        a, b = torch.cartesian_prod(torch.arange(p), torch.arange(1 if op == "/" else 0, p)).T
        if op == "/":  # a * b^-1 with b^-1 the inverse of b modulo the prime p
            c = a * torch.tensor([pow(v, -1, p) for v in b.tolist()]) % p
        else:
            c = {"+": a + b, "-": a - b, "*": a * b}[op] % p
        inputs = torch.stack([a, torch.full_like(a, p), b, torch.full_like(a, p + 1)], 1)  # a, op, b, =
        order = torch.randperm(len(c), generator=torch.Generator().manual_seed(config.train.seed))
        n_train = int(round(self.options.train_fraction * len(c)))
        train, val = order[:n_train], order[n_train:]
        self.splits = {"train": (inputs[train], c[train]), "val": (inputs[val], c[val])}

    def build_model(self):
        model, vocab = self.config.model, self.options.p + 2
        if model.kind == "convex":
            return attention.ConvexTokenClassifier(
                vocab, 4, model.attention.d_model, self.options.p, model.gates, seed=self.config.train.seed
            )
        if model.kind == "convex_blocks":
            return attention.ConvexTransformer(
                vocab,
                4,
                model.attention.d_model,
                self.options.p,
                model.n_layer,
                model.gates,
                seed=self.config.train.seed,
            )
        return attention.GPT(attention_config(model), vocab, 4, model.n_layer)

    def train_batch(self, generator):
        inputs, targets = self.splits["train"]
        rows = sample_rows(len(targets), self.config.train.batch_size, generator)
        return inputs[rows], targets[rows]

    def loss(self, model, batch):
        inputs, targets = batch
        if self.config.model.kind != "transformer":
            logits = model(inputs)
            loss = F.cross_entropy(logits, targets)
            if model.training and self.config.model.group_lasso > 0:
                loss = loss + self.config.model.group_lasso * model.group_lasso()
            return loss, logits
        logits = model(inputs)[0][:, -1]  # the prediction after "="
        return F.cross_entropy(logits, targets), logits

    def evaluate(self, model, generator, device):
        metrics = classification_metrics(self, model, self.splits, device)
        return {"val_loss": metrics["val_loss"], "val_acc": metrics["val_acc"], "train_acc": metrics["train_acc"]}
