"""Seeds trained as one batched model against the same seeds trained one after another, side by side.

For S seeds of one config, three ways of taking the same `--steps` training steps (forward,
backward, gradient clipping and AdamW at the config's learning rate; no evaluation):

- lone: S models, one after another, each the training loop's step (experiments/train.py) on its
  own seed's batches;
- batched: one model whose every weight is stacked over the S seeds (torch.func.stack_module_state),
  its loss the vmap over the seed axis of torch.func.functional_call, one backward for all seeds,
  per-seed clipping and AdamW over the stacked weights (AdamW is elementwise, so the stack is S
  AdamWs). Both start from the same initialisations and draw the same batches, so the per-seed losses
  must agree up to float rounding: the largest difference over all steps and seeds is recorded;
- folded (the bound): one model taking the S batches as one S-fold batch, the same FLOPs in as few and
  as large operations as there can be; no stacking of weights can beat it.

Ratios are lone seconds over batched (throughput_ratio) and over folded (bound_ratio). The achieved
rate of one lone step (GFLOP/s, torch.utils.flop_counter; it counts dense operations only) is set
against a 1024^3 float32 matmul on the same threads: a model near that rate is compute-bound, and
batching can only save its per-operation overhead. The graph transformer's sparse attention
(attention/sparse.py) uses autograd.Functions without functorch support, so it has no batched row;
and since its task draws a graph per batch while one operation needs one graph, every seed trains
on seed 0's batches here (the seeds differ in initialisation only), the best case for batching.

--device runs every way on that device (the clocks read after synchronising it); --quick is a smoke
run: seeds 1,2 and 2 steps.

    python benchmarks/bench_seeds.py [--seeds 1,2,5] [--steps 15] [--models char_gpt,graph_transformer]
                                     [--device cpu] [--quick] [--results-dir benchmarks/results] [--shared no]

Rows go to benchmarks/results/bench_seeds.csv (table "seeds"; benchmarks/results.py).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from machine import synchronize, timed
from results import REPOSITORY, Recorder, add_arguments
from torch.func import functional_call, stack_module_state, vmap
from torch.utils.flop_counter import FlopCounterMode

from experiments.config import load_config
from experiments.tasks import build_task
from experiments.train import learning_rate, optimizer_for, step_generator

CONFIGS = {
    "char_gpt": REPOSITORY / "experiments" / "configs" / "repro" / "attentionx_char.toml",
    "graph_transformer": REPOSITORY / "experiments" / "configs" / "graph_consensus.toml",
}
VMAPPED = ("char_gpt",)  # the sparse attention's autograd.Functions (attention/sparse.py) have no functorch support


def seeded(config, seed):
    """(task, model) of `config` at `seed`, built as the training loop builds them, the model on train.device."""
    config = copy.deepcopy(config)
    config.train.seed = seed
    torch.manual_seed(seed)
    task = build_task(config)
    return task, task.build_model().to(config.train.device)


def batches(task, seeds, steps, shared_graph, device):
    """[step][seed] training batches, their tensors on `device`; with shared_graph, every seed takes seed 0's batch
    (one graph per step)."""
    drawn_for = [0] * len(seeds) if shared_graph else seeds
    return [
        [on_device(task.train_batch(step_generator(seed, step, 0)), device) for seed in drawn_for]
        for step in range(1, steps + 1)
    ]


def on_device(batch, device):
    """The batch with its tensors moved to `device` (other items, such as a graph, as they are)."""
    return tuple(item.to(device) if torch.is_tensor(item) else item for item in batch)


def lone_losses(config, seeds, drawn):
    """Train each seed alone, one after another: (seconds, [seed][step] losses)."""
    train = config.train
    losses, seconds = [], 0.0
    for index, seed in enumerate(seeds):
        task, model = seeded(config, seed)
        optimizer = optimizer_for(model, train, train.device)
        losses.append([])
        synchronize(train.device)
        start = time.perf_counter()
        for step, row in enumerate(drawn):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(step, train)
            loss, _ = task.loss(model, row[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
            optimizer.step()
            losses[-1].append(loss.item())
        synchronize(train.device)
        seconds += time.perf_counter() - start
    return seconds, losses


def clip_per_seed(stacked, max_norm):
    """clip_grad_norm_ of each seed's own gradients: the seed axis is the first of every stacked tensor."""
    norms = torch.stack([p.grad.flatten(1).norm(dim=1) for p in stacked]).norm(dim=0)  # (S,)
    scale = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for p in stacked:
        p.grad.mul_(scale.view(-1, *([1] * (p.dim() - 1))))


def batched_losses(config, seeds, drawn):
    """Train the seeds as one stacked model under vmap: (seconds, [seed][step] losses)."""
    train = config.train
    built = [seeded(config, seed) for seed in seeds]
    task, base = built[0]
    params, buffers = stack_module_state([model for _, model in built])
    stacked = list(params.values())
    groups = [
        {"params": [p for p in stacked if p.dim() >= 3], "weight_decay": train.weight_decay},
        {"params": [p for p in stacked if p.dim() < 3], "weight_decay": 0.0},
    ]
    optimizer = torch.optim.AdamW(groups, lr=train.lr, betas=(train.beta1, train.beta2))

    def one_seed(p, b, tensors, fixed):
        """The loss of one seed's weights on its batch; `fixed` holds the batch's non-tensors (the shared graph)."""
        parts = iter(tensors)
        batch = tuple(next(parts) if item is None else item for item in fixed)
        loss, _ = task.loss(lambda *inputs: functional_call(base, (p, b), inputs), batch)
        return loss

    losses = []
    synchronize(train.device)
    start = time.perf_counter()
    for step, row in enumerate(drawn):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, train)
        fixed = tuple(None if torch.is_tensor(item) else item for item in row[0])
        tensors = tuple(torch.stack([batch[i] for batch in row]) for i, item in enumerate(fixed) if item is None)
        per_seed = vmap(one_seed, in_dims=(0, 0, 0, None))(params, buffers, tensors, fixed)
        optimizer.zero_grad(set_to_none=True)
        per_seed.sum().backward()
        clip_per_seed(stacked, train.grad_clip)
        optimizer.step()
        losses.append(per_seed.detach())
    synchronize(train.device)
    seconds = time.perf_counter() - start
    return seconds, torch.stack(losses).T.tolist()


def folded_seconds(config, seeds, drawn):
    """One model taking the seeds' batches as one S-fold batch (the bound on what stacking can save: the same
    FLOPs in as few, as large operations as there can be): seconds for all steps."""
    train = config.train
    task, model = seeded(config, seeds[0])
    optimizer = optimizer_for(model, train, train.device)
    synchronize(train.device)
    start = time.perf_counter()
    for step, row in enumerate(drawn):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, train)
        batch = tuple(
            torch.cat([b[i] for b in row]) if torch.is_tensor(item) else item for i, item in enumerate(row[0])
        )
        loss, _ = task.loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        optimizer.step()
    synchronize(train.device)
    return time.perf_counter() - start


def gflop_rates(config, drawn):
    """(GFLOP/s of one lone training step of seed 0, GFLOP/s of a 1024^3 float32 matmul) on this process's threads."""
    task, model = seeded(config, 0)

    def step():
        model.zero_grad(set_to_none=True)
        task.loss(model, drawn[0][0])[0].backward()

    with FlopCounterMode(display=False) as counter:
        step()
    model_seconds = timed(step, 5, torch.device(config.train.device))
    a, b = (torch.randn(1024, 1024, device=config.train.device) for _ in "ab")
    a @ b
    matmul_seconds = timed(lambda: a @ b, 10, torch.device(config.train.device))
    return counter.get_total_flops() / model_seconds / 1e9, 2 * 1024**3 / matmul_seconds / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,5", help="comma-separated seed counts S (default 1,2,5)")
    parser.add_argument("--steps", type=int, default=15, help="training steps per seed (default 15)")
    parser.add_argument("--models", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--device", default="cpu", help="the device every way trains on (default cpu)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: seeds 1,2 and 2 steps")
    add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.steps = "1,2", 2
    recorder = Recorder("bench_seeds", args.results_dir, shared=args.shared)
    for name in args.models.split(","):
        config = load_config(CONFIGS[name])
        config.train.device = args.device
        largest = max(int(s) for s in args.seeds.split(","))
        task, _ = seeded(config, 0)
        everything = batches(
            task, list(range(largest)), args.steps, shared_graph=name == "graph_transformer", device=args.device
        )
        model_rate, matmul_rate = gflop_rates(config, everything)
        for count in (int(s) for s in args.seeds.split(",")):
            drawn = [row[:count] for row in everything]
            seeds = list(range(count))
            lone_seconds, lone = lone_losses(config, seeds, drawn)
            folded = folded_seconds(config, seeds, drawn)
            batched_seconds, diff = None, None
            if name in VMAPPED:
                batched_losses(config, seeds, drawn[:2])  # warm-up: vmap's first call pays for its setup
                batched_seconds, batched = batched_losses(config, seeds, drawn)
                diff = max(abs(x - y) for a, b in zip(lone, batched, strict=True) for x, y in zip(a, b, strict=True))
            recorder.add(
                "seeds",
                device=args.device,
                model=name,
                seeds=count,
                steps=args.steps,
                lone_ms_per_seed_step=1e3 * lone_seconds / (count * args.steps),
                batched_ms_per_seed_step=batched_seconds and 1e3 * batched_seconds / (count * args.steps),
                throughput_ratio=batched_seconds and lone_seconds / batched_seconds,
                bound_ratio=lone_seconds / folded,
                max_loss_diff=diff,
                model_gflops=model_rate,
                matmul_gflops=matmul_rate,
            )
            print(
                f"{name} S={count}: lone {lone_seconds:.2f} s, batched {batched_seconds} s, folded {folded:.2f} s "
                f"(bound ratio {lone_seconds / folded:.2f}), max loss diff {diff}, "
                f"model {model_rate:.1f} GFLOP/s vs matmul {matmul_rate:.1f}"
            )


if __name__ == "__main__":
    main()
