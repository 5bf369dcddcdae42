"""A run directory as the trainer writes it, with made-up curves (write_run): what the report and plot tests read."""

import json

import numpy as np

EVALS = (0, 50, 100)


def write_run(path, residual="standard", seed=0, last_step=100, finished=True, model=None):
    """A run directory as the trainer writes it; returns {metric: [value per eval step]}."""
    rng = np.random.default_rng([seed, len(residual)])
    path.mkdir(parents=True)
    model = {"n_layer": 2, "residual": residual, "kernel": "softmax", "symmetric": False, **(model or {})}
    tables = {
        "task": {"name": "char_lm", "data": "input.txt"},
        "model": model,
        "train": {"seed": seed, "max_iters": 100, "device": "cpu", "lr": 0.001},
    }
    (path / "config.toml").write_text(
        "".join(
            f"[{table}]\n" + "".join(f"{key} = {json.dumps(value)}\n" for key, value in values.items())
            for table, values in tables.items()
        )
    )
    evals = {"val_loss": [], "val_acc": [], "train_acc": []}
    with open(path / "metrics.jsonl", "w") as file:
        for step in range(0, last_step + 1, 10):
            row = {
                "step": step,
                "train_loss": 3 / (1 + step / 20) + rng.uniform(0, 0.1),
                "lr": 1e-3,
                "time": step * 0.05 * (1 + seed / 10),
            }
            if step in EVALS:
                row.update(
                    val_loss=3.2 / (1 + step / 25) + rng.uniform(0, 0.2),
                    val_acc=0.2 + step / 200 + rng.uniform(0, 0.05),
                    train_acc=0.25 + step / 200,
                )
                for key in evals:
                    evals[key].append(row[key])
            file.write(json.dumps(row) + "\n")
        if not finished:
            file.write('{"step": 40, "train_lo')  # killed mid-line
    (path / "meta.json").write_text(
        json.dumps(
            {
                "version": "0.1.0",
                "git_commit": "abc1234",
                "torch": "2.13.0",
                "device": "cpu",
                "argv": ["train"],
                "started": "2025-01-01",
            }
        )
    )
    if finished:
        (path / "summary.json").write_text(
            json.dumps(
                {
                    "status": "finished",
                    "steps": 100,
                    "params": 12345,
                    "seconds_per_step": 0.05 * (1 + seed / 10),
                    "tokens_per_second": 1000.0 * (seed + 1),
                    "final": {k: v[-1] for k, v in evals.items()},
                    "best": {
                        "val_loss": min(evals["val_loss"]),
                        "val_acc": max(evals["val_acc"]),
                        "train_acc": max(evals["train_acc"]),
                    },
                }
            )
        )
    return evals
