"""What the comparison tests share: SMALL, a comparison Setting small enough to evaluate a seed in seconds (10-14
node graphs, depth 2, 3 rounds and a checkpoint at 6, one graph per set, 2 fitting steps)."""

from bridge.comparison import Setting
from bridge.consensus import GraphFamily

SMALL = Setting(
    GraphFamily("random_geometric", 10, 14),
    depth=2,
    rounds=3,
    test_graphs=1,
    tune_graphs=1,
    batch=3,
    learned_steps=2,
    finetune_steps=2,
    checkpoints=(6,),
    val_graphs=1,
)
