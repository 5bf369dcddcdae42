"""The training loop: AdamW, warm-up + cosine decay, clipping, evaluation, metrics.jsonl, checkpoints, resume.

    summary = train(load_config("experiments/configs/modular97.toml"), "runs/mod97")

A run directory holds config.toml (resolved), meta.json (package version, git commit, torch, device,
command line, extensions), metrics.jsonl (one row per logged step), ckpt.pt (every
checkpoint_interval steps and at the end) with the one before it in ckpt.prev.pt, best.pt (the
weights of the best evaluation, under the plateau rule: train.patience > 0), summary.json and
curves.png at the end, and sample.txt for language models. Every file but metrics.jsonl is written
to a temporary file, fsynced and renamed; metrics.jsonl is fsynced before each checkpoint, and a
resume truncates it to the checkpoint's position, so a torn last row is dropped and recomputed.
Batches are drawn from a generator seeded by (seed, step), and the checkpoint holds the model,
optimiser and torch RNG states, so a resumed run continues exactly as if it had never stopped. A
checkpoint holds only tensors, numbers, strings, lists and dicts and is read with
torch.load(weights_only=True) (load_checkpoint), so opening a run directory from someone else never
unpickles code.

Under torchrun (`torchrun --nproc-per-node P -m experiments train ...`; world.process_group() starts the
torch.distributed group) the P processes train one model with DistributedDataParallel: every
process draws the same global batch of train.batch_size examples from the (seed, step) generator
and takes its contiguous 1/P share, so DDP's average of the P gradients is the global batch's mean
gradient and P processes take the steps one process takes (up to float rounding; dropout masks
differ). Rank 0 reads and writes every file; the others receive what it read (the checkpoint)
over the process group. A checkpoint holds the unwrapped model, the optimiser and rank 0's RNG
state, none of which depends on P, so a run resumes on any number of processes.

The loop reads top to bottom: train() claims the directory, set_up() starts or restores a Run, take_steps() runs
the steps (train_step, evaluate, track_best, checkpoint_rows) and finish() writes the summary, with the sinks
and the figure writer passed in. checkpoints.py reads and checks checkpoints, stopping.py holds the stopping
rules and train_files.py the run directory's files before the first step (docs/guide/training.md).
"""

import io
import json
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from bridge.fitting import plateau_step, plateaued

from . import log_sinks, rundir
from .checkpoints import (
    BEST,
    CHECKPOINT,
    PREVIOUS,
    check_optimizer,
    checkpoint_limit,
    has_checkpoint,
    run_identity,
    usable_checkpoint,
)
from .config import RunConfig, TrainConfig, to_tables
from .errors import RunFailure, UsageError, WriteError, first_line
from .plots import plot_training
from .runs import read_metrics
from .stopping import lower_is_better, reached, stop_reason
from .tasks import build_task
from .train_files import prepare_directory, reopen, resume_changes, start_run, write_json
from .world import DataParallel, World


class TrainingDiverged(RunFailure):
    """The training loss, a validation metric or a weight became NaN or infinite at `step`: the run ends
    "diverged" (its summary.json says so) with exit status 1 (docs/guide/training.md, "Training")."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run after a whole step, checkpointed at `step` in `out`."""

    def __init__(self, out, step):
        super().__init__(f"interrupted at step {step}; checkpoint in {out / CHECKPOINT}")
        self.out, self.step = out, step


@contextmanager
def sigint_flag():
    """Within the block, the first Ctrl-C only sets flag["set"] (a second one interrupts at once)."""
    flag = {"set": False}
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def note(signum, frame):
        flag["set"] = True
        signal.signal(signal.SIGINT, previous)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


def learning_rate(step, train):
    """Linear warm-up to lr over warmup_iters, then cosine decay to min_lr at max_iters (nanoGPT)."""
    if step < train.warmup_iters:
        return train.lr * (step + 1) / (train.warmup_iters + 1)
    progress = (step - train.warmup_iters) / max(1, train.max_iters - train.warmup_iters)
    return train.min_lr + 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))) * (train.lr - train.min_lr)


def step_generator(seed, step, stream):
    """A torch.Generator fixed by (seed, step, stream): batches do not depend on what ran before."""
    return torch.Generator().manual_seed((seed * 1_000_003 + step) * 4 + stream)


def optimizer_for(model, train, device):
    """AdamW with weight decay on matrices and embeddings only (dim >= 2), as nanoGPT does."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": train.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups, lr=train.lr, betas=(train.beta1, train.beta2), fused=torch.device(device).type == "cuda"
    )


def save_atomic(obj, path, keep=None):
    """torch.save through rundir.write_file: a crash never leaves half a checkpoint; `keep` receives the one before."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    rundir.write_file(path, buffer.getbuffer(), keep)


def write_row(file, row):
    """Append `row` to the open metrics.jsonl as one line; an OSError is a WriteError naming the file."""
    try:
        file.write(json.dumps(row, allow_nan=False) + "\n")
        file.flush()
    except OSError as err:
        raise WriteError(f"cannot write {file.name}: {err.strerror or err}") from None


def sync_rows(file):
    """fsync metrics.jsonl: the rows a checkpoint counts are on disk before the checkpoint is."""
    try:
        os.fsync(file.fileno())
    except OSError as err:
        raise WriteError(f"cannot write {file.name}: {err.strerror or err}") from None


def train(config, out, resume=False, force=False, progress=True, extend=False, log=None):
    """Train config's task and model into run directory `out`; returns the summary dict.

    log: a log_sinks.LogTarget whose sinks (TensorBoard, W&B, MLflow) get every row metrics.jsonl gets, the
    config, and the summary and figures at the end; None for none.

    With resume=True the run continues from out/ckpt.pt (out/ckpt.prev.pt when that cannot be read)
    under the config stored in out/config.toml (a different config is an error); with extend=True too,
    `config` may raise train.max_iters (and change the other EXTENDABLE keys), recorded in meta.json.
    Raises TrainingDiverged when the loss stops being finite, Interrupted after checkpointing the last
    whole step when Ctrl-C (SIGINT) arrives during the steps (KeyboardInterrupt after finishing the run
    when it arrives after the last step's check), and a UsageError naming the file when a write fails
    (the last good checkpoint intact).
    In an initialised torch.distributed group (process_group()) every process calls train() and they
    train together (module docstring); rank 0 writes the files and returns the summary, the others None.
    """
    world = World.current()
    made = not resume and not os.path.lexists(out)  # never an OSError (a path too long is refused just below)
    out = world.first(prepare_directory, out, resume, force)
    try:
        return run_steps(config, out, resume, progress, extend, world, log)
    except BaseException as err:
        if world.rank == 0 and not resume:
            rundir.unclaim(out, made)  # refused before config.toml (memory, device, metric names): no directory left
        if isinstance(err, WriteError):
            kept = (
                "the last good checkpoint is intact; resume with --resume once the problem is fixed"
                if has_checkpoint(out)
                else "no checkpoint was written yet"
            )
            raise WriteError(f"{err} ({kept})") from None
        raise
    finally:
        rundir.release(out)  # the lock, held since prepare_directory (rank 0 only holds one)


FRESH_STATE = {
    "step": 0,
    "elapsed": 0.0,
    "train_seconds": 0.0,
    "timed_steps": 0,
    "first_seconds": 0.0,
    "metrics_bytes": 0,
    "stopped": False,
    "best_value": None,
    "best_step": None,
    "since_best": 0,
}  # a new run's checkpoint "state" (STATE_TYPES); the last 3: the plateau rule


@dataclass
class Run:
    """What the steps of one run share (set_up makes it): its directory, config and processes, the task, the model
    and optimiser, the checkpoint "state" (updated in place) and the run's identity; then, derived from them,
    `forward` (what trains: DDP-wrapped and compiled as configured, wrap), `evaluated` (what evaluates), the
    autocast context, the parameter count and `started`, the perf_counter time the run's elapsed time counts from."""

    config: RunConfig
    out: Path
    world: World
    device: torch.device
    task: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    state: dict
    identity: tuple
    forward: Callable = field(init=False)
    evaluated: Callable = field(init=False)
    autocast: torch.autocast = field(init=False)
    params: int = field(init=False)
    started: float = field(init=False)

    def __post_init__(self):
        self.forward, self.evaluated = wrap(self.model, self.device, self.world, self.config.train.compile)
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.device.type == "cuda")
        self.params = sum(p.numel() for p in self.model.parameters())
        self.started = time.perf_counter() - self.state["elapsed"]


def run_steps(config, out, resume, progress, extend, world, log=None):
    """train() after prepare_directory: set the run up, open its sinks, take its steps, finish it."""
    run = set_up(config, out, resume, extend, world)
    sinks = open_run_sinks(run, log)
    with sigint_flag() as interrupt:
        try:
            take_steps(run, sinks, progress, interrupt)
        except BaseException as err:
            if isinstance(err, TrainingDiverged) and world.rank == 0:
                record_divergence(out, err, run.params, time.perf_counter() - run.started)
            log_sinks.close(sinks, finished=False)
            raise
    summary = finish_run(run, sinks, plot_training)
    if interrupt["set"]:  # Ctrl-C after the last step's check: the run is whole, and the caller stops too
        raise KeyboardInterrupt(f"interrupted after the last step; {out} is finished")
    return summary


def set_up(config: RunConfig, out: Path, resume: bool, extend: bool, world: World) -> Run:
    """The Run of `config` in `out`: a new one (config.toml and meta.json written) or the one its checkpoint holds
    (usable_checkpoint, restore; metrics.jsonl cut back to it); a config the machine or task cannot run is a
    UsageError before anything is written (docs/guide/training.md, "Training")."""
    changed, identity = world.first(resume_changes, config, out, extend) if resume else ({}, None)
    device = run_device(config.train, world)
    torch.manual_seed(config.train.seed)
    task = build_task(config)
    check_metric_names(config, task)
    if world.size > 1:  # a global batch that splits, or an error
        world.shard(task.train_batch(step_generator(config.train.seed, 1, 0)))
    model = task.build_model().to(device)
    optimizer = optimizer_for(model, config.train, device)
    if resume:
        state = restore(out, identity, model, optimizer, device, world, config.train)
        world.first(reopen, out, state, changed, config)
    else:
        state = dict(FRESH_STATE)
        world.first(start_run, out, config, device, world)
        identity = world.first(run_identity, out, config)
    return Run(config, out, world, device, task, model, optimizer, state, identity)


def run_device(train: TrainConfig, world: World) -> torch.device:
    """The device this process trains on: train.device, the process's own GPU under torchrun; UsageError when
    the config asks for CUDA on a machine without it."""
    device = torch.device(train.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"train.device is {train.device} but CUDA is not available on this machine")
    if device.type == "cuda" and world.size > 1:
        device = torch.device("cuda", torch.cuda.current_device())  # process_group() set it from LOCAL_RANK
    return device


def check_metric_names(config: RunConfig, task) -> None:
    """UsageError unless train.stop_metric and train.plateau_metric (when set) are metrics the task logs."""
    for key in ("stop_metric", "plateau_metric"):
        name = getattr(config.train, key)
        if name and name not in task.metrics:
            raise UsageError(
                f"train.{key} must be one of the metrics task {config.task.name} logs "
                f"({', '.join(task.metrics)}), got {name!r}"
            )


def restore(
    out: Path, identity: tuple, model, optimizer, device: torch.device, world: World, train: TrainConfig
) -> dict:
    """Load run `out`'s usable checkpoint (rank 0 reads, every process receives it) into `model`, `optimizer` and
    the RNGs, and return its state; a checkpoint that does not fit the config is a UsageError."""
    checkpoint = world.first(usable_checkpoint, out, identity, train, checkpoint_limit(model))  # RNG states on CPU
    settings = optimizer.state_dict()["param_groups"]  # the config's, before the checkpoint's replace them
    try:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        check_optimizer(optimizer, settings, checkpoint["state"]["step"])
        torch.set_rng_state(checkpoint["rng"])
        if device.type == "cuda" and checkpoint.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(checkpoint["cuda_rng"], device)
    except (RuntimeError, TypeError, ValueError, KeyError, AttributeError) as err:
        raise UsageError(
            f"cannot resume from {out / CHECKPOINT}: its model, optimizer or RNG state does not "
            f"fit this config ({first_line(err)})"
        ) from None
    return {**FRESH_STATE, **checkpoint["state"]}  # checkpoints from before the plateau rule lack its keys


def wrap(model, device: torch.device, world: World, compiled: bool) -> tuple[Callable, Callable]:
    """(what trains, what evaluates): `model` under DistributedDataParallel when several processes train (its
    gradients averaged over them in backward()), each compiled when train.compile is set; every rank evaluates
    the bare model, with no collectives."""
    if world.size == 1:
        forward = torch.compile(model) if compiled else model
        return forward, forward
    wrapped = DataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return (torch.compile(wrapped) if compiled else wrapped), (torch.compile(model) if compiled else model)


def open_run_sinks(run: Run, log) -> list:
    """The dashboards of log target `log` (log_sinks.open_sinks), opened on rank 0 from the run's step on; none
    for log None or on the other ranks."""
    if run.world.rank != 0 or log is None:
        return []
    config_text = rundir.read_text(run.out / "config.toml")
    return log_sinks.open_sinks(
        log, run.out, config_text, to_tables(run.config), run.identity[0], run.state["step"] + 1
    )


def take_steps(run: Run, sinks: list, progress: bool, interrupt: dict) -> None:
    """The run's steps from its state's step to train.max_iters (none when it stopped early): each step's row
    goes to metrics.jsonl (rank 0) and `sinks` at the logged steps, and a checkpoint is written at
    checkpoint_interval, the last step, an early stop and a Ctrl-C (`interrupt` set: Interrupted after it)."""
    train, state = run.config.train, run.state
    first_step = state["step"] + 1
    metrics_file = rundir.open_append(run.out / "metrics.jsonl") if run.world.rank == 0 else None  # rank 0 writes
    bar = tqdm(
        total=train.max_iters,
        initial=state["step"],
        disable=not progress or run.world.rank != 0,
        desc=run.out.name,
        dynamic_ncols=True,
    )
    with bar, closing(metrics_file) if metrics_file is not None else nullcontext():
        last = state["step"] if state.get("stopped") else train.max_iters
        for step in range(first_step, last + 1):  # step = updates done after this one
            lr = learning_rate(step - 1, train)
            tick = time.perf_counter()
            train_loss, interrupted = train_step(run, step, lr, interrupt)
            count_time(state, time.perf_counter() - tick, first=step == first_step)
            row = {"step": step, "train_loss": train_loss, "lr": lr}
            evaluating = step % train.eval_interval == 0 or step == train.max_iters
            if evaluating:
                row.update(evaluate(run, step))
            if evaluating or step % train.checkpoint_interval == 0 or interrupted:  # every checkpoint's step
                check_finite(run.model, row, step)
            if evaluating:
                track_best(run, step, row)
                bar.set_postfix({k: f"{v:.4f}" for k, v in row.items() if k.startswith("val_")}, refresh=False)
            row["time"] = time.perf_counter() - run.started
            if metrics_file is not None and (step % train.log_interval == 0 or "val_loss" in row):
                write_row(metrics_file, row)
                log_sinks.send(sinks, row)
            bar.set_description(f"{run.out.name} loss {train_loss:.4f}", refresh=False)
            bar.update()
            state["stopped"] = reached(row, train) or plateaued(state["since_best"], train.patience)
            ends = step == train.max_iters or state["stopped"] or interrupted
            if metrics_file is not None and (step % train.checkpoint_interval == 0 or ends):
                checkpoint_rows(run, step, metrics_file, row["time"])
            if interrupted:
                raise Interrupted(run.out, step)
            if state["stopped"]:
                break


def train_step(run: Run, step: int, lr: float, interrupt: dict) -> tuple[float, bool]:
    """One update at learning rate `lr` on this process's share of step `step`'s global batch; (the global batch's
    loss, whether Ctrl-C reached any process by the step's end). TrainingDiverged when the loss is not finite."""
    run.model.train()
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    batch = tuple(
        t.to(run.device) if torch.is_tensor(t) else t  # e.g. a TokenGraph stays as it is
        for t in run.world.shard(run.task.train_batch(step_generator(run.config.train.seed, step, 0)))
    )
    with run.autocast:
        loss, _ = run.task.loss(run.forward, batch)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if run.config.train.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(run.model.parameters(), run.config.train.grad_clip)
    run.optimizer.step()
    train_loss, interrupted = run.world.loss_and_flag(loss, interrupt["set"])
    if not math.isfinite(train_loss):
        raise TrainingDiverged(f"the training loss became {train_loss} at step {step}", step)
    return train_loss, interrupted


def count_time(state: dict, seconds: float, first: bool) -> None:
    """Add one step's `seconds` to the state's timing: the first step of a process (warm-up and compilation) is
    kept apart as first_seconds; the others add up in train_seconds over timed_steps (finish)."""
    if first:
        state["first_seconds"] = seconds
    else:
        state["train_seconds"] += seconds
        state["timed_steps"] += 1


def evaluate(run: Run, step: int) -> dict:
    """The task's validation metrics at `step` (rank 0's numbers, shared, so every rank stops alike)."""
    run.model.eval()
    with run.autocast:
        metrics = run.task.evaluate(run.evaluated, step_generator(run.config.train.seed, step, 1), run.device)
    return run.world.share(metrics)


def track_best(run: Run, step: int, row: dict) -> None:
    """Apply the plateau rule (train.patience > 0) to evaluation `row`: a new best is recorded in the state and
    its weights written to best.pt (rank 0) (docs/guide/training.md, "Until validation stops improving")."""
    train, state = run.config.train, run.state
    if not train.patience:
        return
    watched = train.plateau_metric or run.task.metrics[0]
    state["best_value"], state["since_best"] = plateau_step(
        state["best_value"], state["since_best"], row[watched], train.min_delta, lower_is_better(watched)
    )
    if state["since_best"] == 0:
        state["best_step"] = step
        if run.world.rank == 0:
            save_atomic({"model": run.model.state_dict(), "step": step}, run.out / BEST)


def checkpoint_rows(run: Run, step: int, metrics_file, elapsed: float) -> None:
    """Checkpoint `step` with the rows of metrics.jsonl so far: their length (metrics_bytes, what a resume truncates
    the file to) and `elapsed` go into the state, and they are fsynced before the checkpoint is written."""
    run.state["elapsed"], run.state["metrics_bytes"] = elapsed, metrics_file.tell()
    sync_rows(metrics_file)
    save_checkpoint(run, step)


def save_checkpoint(run: Run, step: int) -> None:
    """ckpt.pt at `step` (the one before kept as ckpt.prev.pt): the model, optimiser, RNG states, state, config
    and the run's identity (docs/guide/runs.md)."""
    cuda = run.device.type == "cuda"
    save_atomic(
        {
            "model": run.model.state_dict(),
            "optimizer": run.optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state(run.device) if cuda else None,
            "state": {**run.state, "step": step},
            "config": to_tables(run.config),
            "run_id": run.identity[0],
            "config_hash": run.identity[1],
        },
        run.out / CHECKPOINT,
        run.out / PREVIOUS,
    )


def finish_run(run: Run, sinks: list, plot: Callable) -> dict | None:
    """finish() on rank 0 (None on the others), then the summary and curves.png to `sinks`, which are closed
    whatever happens."""
    summary = None
    try:
        summary = finish(run, plot) if run.world.rank == 0 else None
        if summary is not None:
            log_sinks.finish(sinks, summary, [run.out / "curves.png"])
    finally:
        log_sinks.close(sinks, finished=summary is not None)
    return summary


def check_finite(model, row: dict, step: int) -> None:
    """TrainingDiverged unless every metric in `row` and every weight of `model` is finite (one host sync, at the
    steps that evaluate or checkpoint: a checkpoint never holds a diverged model)."""
    bad = [f"{key} {value}" for key, value in row.items() if isinstance(value, float) and not math.isfinite(value)]
    if bad:
        raise TrainingDiverged(f"the metrics became NaN or infinite at step {step} ({', '.join(bad)})", step)
    if not bool(torch.stack([torch.isfinite(p).all() for p in model.parameters()]).all()):
        raise TrainingDiverged(f"the weights became NaN or infinite at step {step}", step)


def record_divergence(out, err: TrainingDiverged, params: int, seconds: float) -> None:
    """summary.json of a run that diverged: status "diverged", the step, what became non-finite, the parameters
    and the wall time; no metrics row holds the non-finite values (docs/guide/training.md, "Training")."""
    write_json(
        {"status": "diverged", "steps": err.step, "error": str(err), "params": params, "wall_seconds": seconds},
        out / "summary.json",
    )


def finish(run: Run, plot: Callable) -> dict:
    """curves.png, sample.txt (language models) and, last, summary.json from the finished run.

    seconds_per_step: forward, backward and update time per step, batch building included, over
    the steps after the first of each process (warm-up and compilation left out); `plot` draws curves.png
    (plots.plot_training)."""
    task, model, config, out, state = run.task, run.model, run.config, run.out, run.state
    rows = read_metrics(out / "metrics.jsonl")
    evals = [row for row in rows if "val_loss" in row]
    steps = rows[-1]["step"] if rows else 0  # max_iters, or fewer when early stopping ended the run
    seconds_per_step = state["train_seconds"] / state["timed_steps"] if state["timed_steps"] else state["first_seconds"]
    best = {m: (min if lower_is_better(m) else max)(row[m] for row in evals) for m in task.metrics}
    summary = {
        "status": "finished",
        "steps": steps,
        "params": run.params,
        "seconds_per_step": seconds_per_step,
        "tokens_per_second": (
            config.train.batch_size * task.tokens_per_example / seconds_per_step if task.tokens_per_example else None
        ),
        "final": {m: evals[-1][m] for m in task.metrics},
        "best": best,
        "wall_seconds": state["elapsed"],
        "stopped_early": steps < config.train.max_iters,
        "stopped_by": stop_reason(state, config.train),
        "best_step": state["best_step"],
        **({"processes": run.world.size} if run.world.size > 1 else {}),
    }
    plot(
        rows,
        out / "curves.png",
        best_step=state["best_step"],
        title=f"{config.task.name}: {config.model.attention.residual} / {config.model.attention.kernel}",
    )
    if hasattr(task, "sample") and task.options.sample_length > 0:
        model.eval()
        device = next(model.parameters()).device
        generator = torch.Generator(device).manual_seed(step_generator(config.train.seed, steps, 2).initial_seed())
        rundir.write_file(out / "sample.txt", task.sample(model, generator, device))
    write_json(summary, out / "summary.json")  # last: its presence marks the run finished
    return summary
