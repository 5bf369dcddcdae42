"""What the run-directory tests share: a modular training run of about a second (checkpoints at steps 2 and 4)
and `forge`, which records a crafted file in a run's marker as a hostile sender can (the marker is plain JSON)."""

import hashlib
import json
from pathlib import Path

from experiments.rundir import MARKER

CONFIGS = Path(__file__).resolve().parents[1] / "experiments" / "configs"
MODULAR = str(CONFIGS / "modular97.toml")
TINY = [
    "task.p=5",
    "model.d_model=8",
    "model.n_head=2",
    "train.max_iters=4",
    "train.eval_interval=2",
    "train.checkpoint_interval=2",
    "train.eval_iters=1",
    "train.patience=5",
]
TRAIN = ["train", MODULAR, *[f"--set={s}" for s in TINY], "--no-progress"]


def forge(directory: Path, *names: str) -> None:
    """Record the present bytes of `names` in `directory`'s marker, as a hostile sender does: ownership then
    holds, and what a command checks beyond it must refuse the crafted files."""
    marker = json.loads((directory / MARKER).read_text())
    for name in names:
        data = (directory / name).read_bytes()
        marker["files"][name] = [{"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    (directory / MARKER).write_text(json.dumps(marker))
