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
"""

import hashlib
import io
import json
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from . import log_sinks, rundir
from .common import RunFailure, UsageError, WriteError, first_line, package_version
from .config import TrainConfig, from_tables, load_config, to_tables, to_toml
from .memory import available_bytes
from .plots import plot_training
from .runs import is_number, parse_metrics, read_meta, read_metrics, read_summary, read_toml
from .tasks import build_task
from .world import DataParallel, World

CHECKPOINT, PREVIOUS = "ckpt.pt", "ckpt.prev.pt"  # the newest checkpoint, and the one before it
BEST = "best.pt"  # the model weights at the best evaluation, kept under the plateau rule (train.patience > 0)
EXTENDABLE = ("max_iters", "warmup_iters", "lr", "min_lr")  # [train] keys --extend may change: the schedule
RUN_FILES = ("config.toml", "metrics.jsonl", CHECKPOINT, PREVIOUS)  # what marks a directory as a run
WRITES = (*RUN_FILES, BEST, "meta.json", "summary.json", "curves.png", "sample.txt")  # what a run writes and replaces


class TrainingDiverged(RunFailure):
    """The training loss, a validation metric or a weight became NaN or infinite at `step`: the run ends
    "diverged" (its summary.json says so) with exit status 1 (docs/guide/training.md, "Training")."""

    def __init__(self, message: str, step: int):
        super().__init__(message)
        self.step = step


class UnsafeCheckpoint(UsageError):
    """A checkpoint that needs pickle: crafted or from another program, never a crash's leftover; not skipped."""


class ForeignCheckpoint(UsageError):
    """A checkpoint of another run (its run id or config hash differs from the run's): never resumed from."""


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


def lower_is_better(metric):
    """Losses and errors are minimised; everything else (accuracies) maximised."""
    return "loss" in metric or "error" in metric


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


def prepare_directory(out, resume, force):
    """Claim `out` (rundir.claim: opened once, locked for the run's life, marked), new or to be resumed; never
    overwrite an existing run without force.

    --force empties `out` of the files pdmm-bridge wrote there (their recorded contents) and refuses when
    anything else is there; --resume needs the run's own files as they were written; a run directory that
    is a symbolic link, or in use by another command, is refused (docs/guide/runs.md)."""
    out = Path(out)
    rundir.refuse_link(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file, not a run directory")
    if resume:
        rundir.refuse_links(out, WRITES)  # a link anywhere the run writes: refused before anything is read
        if not has_checkpoint(out):
            started = (out / "metrics.jsonl").is_file()
            raise UsageError(
                f"cannot resume: {out} has no {CHECKPOINT}"
                + (" (the run stopped before its first checkpoint; start it again with --force)" if started else "")
            )
        refusal = f"cannot resume {out}: its marker does not record it as a train run"
        return rundir.claim(out, "train", reusable=True, writes=WRITES, refusal=refusal)
    refusal = f"{out} already holds a run; pass --resume to continue it or --force to overwrite it"
    return rundir.claim(out, "train", force=force, writes=WRITES, clear=True, refusal=refusal)


def has_checkpoint(out):
    """Whether run directory `out` holds a checkpoint to resume from (ckpt.pt or ckpt.prev.pt)."""
    return any((Path(out) / name).is_file() for name in (CHECKPOINT, PREVIOUS))


def git_commit():
    """The commit of the checkout the package runs from, or None."""
    try:
        root = Path(__file__).resolve().parent.parent
        return subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def save_atomic(obj, path, keep=None):
    """torch.save through rundir.write_file: a crash never leaves half a checkpoint; `keep` receives the one before."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    rundir.write_file(path, buffer.getbuffer(), keep)


ZIP_SIGNATURE, PICKLE_SIGNATURE = b"PK\x03\x04", b"\x80"  # how a torch.save archive and a bare pickle begin
CHECKPOINT_SLACK = 16 * 2**20  # bytes a checkpoint holds besides its tensors' data: RNG states, config, archive


def checkpoint_limit(model) -> int:
    """The most bytes a checkpoint of `model` can take: its weights and buffers three times over (the weights and
    AdamW's two moments) plus CHECKPOINT_SLACK; a larger file is no checkpoint of it (load_checkpoint)."""
    return 3 * sum(t.numel() * t.element_size() for t in model.state_dict().values()) + CHECKPOINT_SLACK


def load_checkpoint(path, keys=("model",), limit=None):
    """The dict in checkpoint `path`, read with torch.load(weights_only=True): no pickled code ever runs.

    The file is refused before it is read when it is larger than `limit` bytes (checkpoint_limit of the model it
    is for; None: the memory available) or does not begin as a torch.save archive does; a file that needs more
    than tensors, numbers, strings, lists and dicts, cannot be read, or lacks one of `keys` or has it in another
    shape (entry_problem) is a UsageError naming it and what is wrong (docs/guide/runs.md, "A checkpoint is
    checked before it is used")."""
    data = read_checkpoint(path, available_bytes("cpu") if limit is None else limit)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol")  # noise before the refusal
            checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UnsafeCheckpoint(
            f"refusing to load {path}: it holds objects only pickle can rebuild, and unpickling can run "
            "code; pdmm-bridge checkpoints hold only tensors, numbers, strings, lists and dicts, so this "
            "file is corrupt, from another program or crafted"
        ) from None
    except Exception:  # torch raises many types for malformed files
        raise UsageError(
            f"cannot read {path}: it is empty, truncated or not a PyTorch checkpoint (its archive does not open)"
        ) from None
    missing = [key for key in keys if not (isinstance(checkpoint, dict) and key in checkpoint)]
    if missing:
        raise UsageError(f"{path} is not a pdmm-bridge checkpoint: it has no {', '.join(missing)}")
    wrong = [f"{key} ({problem})" for key in keys if (problem := entry_problem(key, checkpoint[key]))]
    if wrong:
        raise UsageError(f"{path} is not a pdmm-bridge checkpoint: wrong {'; '.join(wrong)}")
    return checkpoint


def read_checkpoint(path, limit: int | None) -> bytes:
    """The bytes of checkpoint `path`, its size checked against `limit` (None: none known) before anything is
    read; UsageError saying what is wrong with a file too large, empty or not a torch.save archive (a bare pickle
    is UnsafeCheckpoint: loading one can run code)."""
    try:
        data = rundir.read_bytes(path, limit=limit)
    except rundir.TooLarge as err:
        raise UsageError(
            f"refusing to read {path}: it is {err.size:,} bytes, more than a checkpoint of this model can be "
            f"({limit:,} bytes); it is not this run's checkpoint, or it was altered"
        ) from None
    if not data:
        raise UsageError(f"cannot read {path}: it is empty, truncated or not a PyTorch checkpoint (0 bytes)")
    if data.startswith(PICKLE_SIGNATURE):
        raise UnsafeCheckpoint(
            f"refusing to load {path}: it is a bare pickle, not a torch.save archive, and unpickling can run code; "
            "pdmm-bridge checkpoints are archives of tensors, numbers, strings, lists and dicts, so this file is "
            "from another program or crafted"
        )
    if not data.startswith(ZIP_SIGNATURE):
        raise UsageError(
            f"cannot read {path}: it is empty, truncated or not a PyTorch checkpoint (it does not begin as a "
            "torch.save archive does)"
        )
    return data


NUMBER = (int, float)
STATE_TYPES = {
    "step": int,
    "metrics_bytes": int,
    "elapsed": NUMBER,
    "train_seconds": NUMBER,
    "timed_steps": int,
    "first_seconds": NUMBER,
    "stopped": bool,
    "best_value": NUMBER,
    "best_step": int,
    "since_best": int,
}  # a checkpoint's "state": what a resume reads (step and metrics_bytes required)


def entry_problem(key: str, value) -> str | None:
    """What is wrong with entry `key` of a checkpoint (model, optimizer, rng, state), None when it has the
    shape train() writes."""
    if key == "model" and not (
        isinstance(value, dict) and all(isinstance(k, str) and torch.is_tensor(v) for k, v in value.items())
    ):
        return "expected a dict of parameter names to tensors"
    if key == "model" and not all(bool(torch.isfinite(v).all()) for v in value.values() if v.is_floating_point()):
        return "it holds NaN or infinite weights"
    if key == "optimizer" and not (
        isinstance(value, dict) and isinstance(value.get("state"), dict) and isinstance(value.get("param_groups"), list)
    ):
        return "expected an optimizer state dict with state and param_groups"
    if key == "rng" and not (torch.is_tensor(value) and value.dtype == torch.uint8):
        return "expected a byte tensor"
    if key == "state":
        return state_problem(value)
    return None


def state_problem(state) -> str | None:
    """What is wrong with a checkpoint's "state" dict (STATE_TYPES: every number finite and >= 0), None when
    nothing is."""
    if not isinstance(state, dict) or "step" not in state or "metrics_bytes" not in state:
        return "expected a dict with step and metrics_bytes"
    for name, kind in STATE_TYPES.items():
        value = state.get(name)
        if value is None and name not in ("step", "metrics_bytes"):
            continue
        valid = (
            isinstance(value, bool)
            if kind is bool
            else is_number(value) and isinstance(value, kind) and math.isfinite(value) and value >= 0
        )
        if not valid:
            return f"{name} must be {'true or false' if kind is bool else 'a finite number >= 0'}, got {value!r}"
    return None


def state_range_problem(state: dict, train: TrainConfig) -> str | None:
    """What in a checkpoint's well-typed "state" (state_problem) the run's [train] settings rule out, None when
    nothing: a step beyond train.max_iters; timed steps, the best step or evaluations since it beyond the step;
    or stopped where no stopping rule could have stopped the run there (an evaluation step, with the plateau
    rule's evaluations since the best reaching train.patience, or a train.stop_metric)."""
    step = state["step"]
    if step > train.max_iters:
        return f"step {step} is beyond train.max_iters = {train.max_iters}"
    for name in ("timed_steps", "best_step", "since_best"):
        if (state.get(name) or 0) > step:
            return f"{name} {state[name]} is beyond step {step}"
    if state.get("stopped"):
        evaluated = step % train.eval_interval == 0 or step == train.max_iters
        by_rule = plateaued(state.get("since_best") or 0, train.patience) or bool(train.stop_metric)
        if not (evaluated and by_rule):
            return f"stopped is true at step {step}, where no stopping rule of the config stops a run"
    return None


def check_optimizer(optimizer, settings, steps: int) -> None:
    """ValueError unless the state loaded into `optimizer` is one its own steps could have made: each
    parameter's state tensors are finite and have the parameter's shape or are scalars (AdamW's step, a whole
    number from 0 to `steps`, the run's steps), and every group's settings but the learning rate (set at each
    step) are `settings`, the config's (a crafted checkpoint would otherwise fail at the first step, after the
    resume began, or train with other settings)."""
    for group, expected in zip(optimizer.param_groups, settings, strict=False):
        for key, value in expected.items():
            if key not in ("params", "lr", "initial_lr") and group.get(key) != value:
                raise ValueError(f"optimizer setting {key} is {group.get(key)!r}, the config gives {value!r}")
        for parameter in group["params"]:
            for name, value in optimizer.state.get(parameter, {}).items():
                scalar = is_number(value) or torch.is_tensor(value) and value.dim() == 0
                if not (scalar or torch.is_tensor(value) and value.shape == parameter.shape):
                    raise ValueError(
                        f"optimizer state {name} of a {tuple(parameter.shape)} parameter is not a tensor "
                        "of that shape or a scalar"
                    )
                if not bool(torch.isfinite(torch.as_tensor(value)).all()):
                    raise ValueError(f"optimizer state {name} holds NaN or infinite values")
                if name == "step" and not (0 <= float(value) <= steps and float(value).is_integer()):
                    raise ValueError(f"optimizer step {float(value):g} is not a whole number from 0 to {steps}")


def best_weights(run_dir) -> Path:
    """The weights file that stands for run `run_dir` (read it with load_weights): best.pt when the run
    trained under the plateau rule (train.patience > 0), else ckpt.pt."""
    config = Path(run_dir) / "config.toml"
    if not config.is_file():
        raise UsageError(f"{run_dir} is not a run directory: it has no config.toml")
    return Path(run_dir) / (BEST if load_config(rundir.inside(config)).train.patience else CHECKPOINT)


def load_weights(model, path):
    """Load the model weights of checkpoint `path` into `model`; a file larger than a checkpoint of `model` can be
    (checkpoint_limit) and weights that do not fit it are a UsageError."""
    try:
        model.load_state_dict(load_checkpoint(path, limit=checkpoint_limit(model))["model"])
    except (RuntimeError, TypeError, AttributeError) as err:
        raise UsageError(f"the weights in {path} do not fit the model its config builds ({first_line(err)})") from None


def write_json(obj, path):
    """obj as indented JSON in `path` (rundir.write_file); NaN or infinity is a ValueError, never written."""
    rundir.write_file(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


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


def usable_checkpoint(out, identity, train: TrainConfig, limit: int | None = None):
    """The newest checkpoint of `out` that loads, fits metrics.jsonl and has a state the run's [train] settings
    allow (state_range_problem), reporting one skipped in one line; `limit`: the most bytes one may take
    (checkpoint_limit).

    A checkpoint that needs pickle (UnsafeCheckpoint) or belongs to another run (ForeignCheckpoint: its
    (run id, config hash) differs from `identity`, run_identity(out)) is an error, not skipped: no crash
    leaves one. The metrics rows the checkpoint counts are validated too (check_rows)."""
    problems = []
    for name in (CHECKPOINT, PREVIOUS):
        if not (out / name).is_file():
            continue
        try:
            checkpoint = load_checkpoint(out / name, ("model", "optimizer", "rng", "state"), limit)
            check_identity(checkpoint, identity, out / name)
            if problem := state_range_problem(checkpoint["state"], train):
                raise UsageError(f"{out / name} is not a checkpoint of this run's settings: {problem}")
            logged = (out / "metrics.jsonl").stat().st_size if (out / "metrics.jsonl").is_file() else 0
            if logged < checkpoint["state"]["metrics_bytes"]:
                raise UsageError(f"{out / name} counts more metrics rows than {out / 'metrics.jsonl'} holds")
        except (UnsafeCheckpoint, ForeignCheckpoint):
            raise
        except UsageError as err:
            problems.append(str(err))
            continue
        if problems:
            print(
                f"pdmm-bridge train: warning: {problems[-1]}; resuming from {out / name} "
                f"(step {checkpoint['state']['step']}), which replaces it",
                file=sys.stderr,
            )
        check_rows(out / "metrics.jsonl", checkpoint["state"]["metrics_bytes"])
        if name == PREVIOUS:  # so the next checkpoint keeps this good one as ckpt.prev.pt, not a bad ckpt.pt
            rundir.rename(out / PREVIOUS, out / CHECKPOINT)
        return checkpoint
    raise UsageError(
        f"cannot resume {out}: no checkpoint can be used ({'; '.join(problems)}); start it again with --force"
    )


def check_rows(file, size):
    """UsageError naming `file` and the line when its first `size` bytes (the rows a checkpoint counts) are not
    whole metrics rows: a resume refuses them before training, not after."""
    data = rundir.read_bytes(file)[:size]
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{file}: the rows the checkpoint counts are not UTF-8 text; the file was altered") from None
    if text and not text.endswith("\n"):
        raise UsageError(f"{file}: the rows the checkpoint counts end mid-line; the file was altered")
    parse_metrics(text, file, torn_last=False)


def config_hash(tables: dict) -> str:
    """sha256 of a run's config tables less the keys --extend may change (EXTENDABLE): what the run is."""
    kept = {
        table: {key: value for key, value in values.items() if not (table == "train" and key in EXTENDABLE)}
        for table, values in tables.items()
    }
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()


def run_identity(out, stored) -> tuple:
    """(run id from meta.json, None before run ids; config_hash of `stored`, the config in out/config.toml):
    what every checkpoint of run `out` carries."""
    meta = read_meta(out / "meta.json") or {}
    return meta.get("run_id"), config_hash(to_tables(stored))


def check_identity(checkpoint, identity, path):
    """ForeignCheckpoint unless the checkpoint's run id and config hash are the run's (`identity`)."""
    run_id, expected = identity
    stored = checkpoint.get("config_hash") or (
        config_hash(checkpoint["config"]) if isinstance(checkpoint.get("config"), dict) else None
    )
    if checkpoint.get("run_id") != run_id or stored != expected:
        what = "run id" if checkpoint.get("run_id") != run_id else "config"
        raise ForeignCheckpoint(
            f"{path} belongs to another run (its {what} differs from {path.parent}'s "
            "meta.json and config.toml); refusing to resume from it"
        )


def extension(stored, config, out):
    """{key: (old, new)} of the [train] schedule keys `config` changes; UsageError if anything else differs."""
    old, new = to_tables(stored), to_tables(config)
    changed = {
        key: (old["train"][key], new["train"][key]) for key in EXTENDABLE if old["train"][key] != new["train"][key]
    }
    for key in changed:
        old["train"][key] = new["train"][key]
    if old != new:
        raise UsageError(
            f"--extend changes only train.{', train.'.join(EXTENDABLE)}; the config differs from "
            f"{out / 'config.toml'} in more"
        )
    if changed and config.train.max_iters <= stored.train.max_iters:
        raise UsageError(
            f"--extend needs a train.max_iters above the run's {stored.train.max_iters}, got {config.train.max_iters}"
        )
    return changed


def record_extension(out, changed, state, config):
    """Reopen a run for --extend: drop summary.json, note the change in meta.json, then store the new config."""
    if state.get("stopped"):
        how = (
            "by the plateau rule (train.patience evaluations without improvement)"
            if stop_reason(state, config.train) == "plateau"
            else "when train.stop_metric was reached"
        )
        raise UsageError(
            f"cannot extend {out}: it stopped early at step {state['step']} {how}, and would stop there again"
        )
    rundir.remove(out / "summary.json")
    meta = read_meta(out / "meta.json") or {}
    meta.setdefault("extended", []).append(
        {
            "at_step": state["step"],
            "argv": sys.argv,
            "time": datetime.now(UTC).isoformat(timespec="seconds"),
            **{f"train.{key}": {"from": old, "to": new} for key, (old, new) in changed.items()},
        }
    )
    write_json(meta, out / "meta.json")
    rundir.write_file(out / "config.toml", to_toml(config))


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


def resume_changes(config, out, extend):
    """(the EXTENDABLE keys `config` changes in run `out` (extension()), the run's identity (run_identity));
    UsageError if it cannot be resumed with it."""
    for name in ("config.toml", "metrics.jsonl"):
        if not (out / name).is_file():
            raise UsageError(f"cannot resume: {out} has no {name}")
    stored = from_tables(read_toml(out / "config.toml"), source=str(out / "config.toml"))
    identity = run_identity(out, stored)
    if extend:
        return extension(stored, config, out), identity
    if to_tables(stored) != to_tables(config):
        raise UsageError(
            f"the config differs from the one {out} was started with ({out / 'config.toml'}); "
            "resume with that file, or pass --extend to raise train.max_iters"
        )
    return {}, identity


def reopen(out, state, changed, config):
    """Truncate metrics.jsonl to the checkpoint's rows (a torn one too: they are recomputed), drop the summary of
    an attempt that diverged (the resume is a new attempt); record --extend."""
    rundir.truncate(out / "metrics.jsonl", state["metrics_bytes"])
    if (out / "summary.json").is_file() and not finished(out):
        rundir.remove(out / "summary.json")
    if changed:
        record_extension(out, changed, state, config)


def start_run(out, config, device, world):
    """config.toml and meta.json of a new run (meta.json's run_id: the identity its checkpoints carry)."""
    rundir.write_file(out / "config.toml", to_toml(config))
    processes = {"processes": world.size, "backend": dist.get_backend()} if world.size > 1 else {}
    write_json(
        {
            "run_id": uuid.uuid4().hex,
            "version": package_version(),
            "git_commit": git_commit(),
            "torch": torch.__version__,
            "device": str(device),
            **processes,
            "argv": sys.argv,
            "python": sys.version.split()[0],
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        out / "meta.json",
    )


def run_steps(config, out, resume, progress, extend, world, log=None):
    """train() after prepare_directory."""
    changed, identity = world.first(resume_changes, config, out, extend) if resume else ({}, None)
    train_cfg = config.train
    device = torch.device(train_cfg.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"train.device is {train_cfg.device} but CUDA is not available on this machine")
    if device.type == "cuda" and world.size > 1:
        device = torch.device("cuda", torch.cuda.current_device())  # process_group() set it from LOCAL_RANK
    torch.manual_seed(train_cfg.seed)
    task = build_task(config)
    if train_cfg.stop_metric and train_cfg.stop_metric not in task.metrics:
        raise UsageError(
            f"train.stop_metric must be one of the metrics task {config.task.name} logs "
            f"({', '.join(task.metrics)}), got {train_cfg.stop_metric!r}"
        )
    if train_cfg.plateau_metric and train_cfg.plateau_metric not in task.metrics:
        raise UsageError(
            f"train.plateau_metric must be one of the metrics task {config.task.name} logs "
            f"({', '.join(task.metrics)}), got {train_cfg.plateau_metric!r}"
        )
    watched = train_cfg.plateau_metric or task.metrics[0]  # the plateau rule's metric
    lower = lower_is_better(watched)
    if world.size > 1:
        world.shard(task.train_batch(step_generator(train_cfg.seed, 1, 0)))  # a global batch that splits, or an error
    model = task.build_model().to(device)
    optimizer = optimizer_for(model, train_cfg, device)
    params = sum(p.numel() for p in model.parameters())
    state = {
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
    }  # the last 3: the plateau rule
    if resume:
        checkpoint = world.first(  # RNG states stay on CPU; rank 0 reads, all receive
            usable_checkpoint, out, identity, train_cfg, checkpoint_limit(model)
        )
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
        state = {**state, **checkpoint["state"]}  # checkpoints from before the plateau rule lack its keys
        world.first(reopen, out, state, changed, config)
    else:
        world.first(start_run, out, config, device, world)
        identity = world.first(run_identity, out, config)
    if world.size > 1:  # gradients averaged over the processes in backward()
        wrapped = DataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        forward = torch.compile(wrapped) if train_cfg.compile else wrapped
        evaluated = torch.compile(model) if train_cfg.compile else model  # every rank evaluates; no collectives
    else:
        forward = evaluated = torch.compile(model) if train_cfg.compile else model
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    def checkpoint(step):
        save_atomic(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(),
                "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                "state": {**state, "step": step},
                "config": to_tables(config),
                "run_id": identity[0],
                "config_hash": identity[1],
            },
            out / CHECKPOINT,
            out / PREVIOUS,
        )

    start_time = time.perf_counter() - state["elapsed"]
    first_step = state["step"] + 1
    sinks = (
        log_sinks.open_sinks(
            log, out, rundir.read_text(out / "config.toml"), to_tables(config), identity[0], state["step"] + 1
        )
        if world.rank == 0 and log is not None
        else []
    )
    metrics_file = rundir.open_append(out / "metrics.jsonl") if world.rank == 0 else None  # rank 0 writes every file
    bar = tqdm(
        total=train_cfg.max_iters,
        initial=state["step"],
        disable=not progress or world.rank != 0,
        desc=out.name,
        dynamic_ncols=True,
    )
    with sigint_flag() as interrupt:
        try:
            last = state["step"] if state.get("stopped") else train_cfg.max_iters
            for step in range(state["step"] + 1, last + 1):  # step = updates done after this one
                model.train()
                lr = learning_rate(step - 1, train_cfg)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                tick = time.perf_counter()
                batch = tuple(
                    t.to(device) if torch.is_tensor(t) else t  # e.g. a TokenGraph stays as it is
                    for t in world.shard(task.train_batch(step_generator(train_cfg.seed, step, 0)))
                )
                with autocast:
                    loss, _ = task.loss(forward, batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if train_cfg.grad_clip > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
                optimizer.step()
                train_loss, interrupted = world.loss_and_flag(loss, interrupt["set"])  # the global batch's loss
                if not math.isfinite(train_loss):
                    raise TrainingDiverged(f"the training loss became {train_loss} at step {step}", step)
                if step > first_step:  # the first step of a process pays for warm-up (and compilation)
                    state["train_seconds"] += time.perf_counter() - tick
                    state["timed_steps"] += 1
                else:
                    state["first_seconds"] = time.perf_counter() - tick
                row = {"step": step, "train_loss": train_loss, "lr": lr}
                evaluating = step % train_cfg.eval_interval == 0 or step == train_cfg.max_iters
                if evaluating:
                    model.eval()
                    with autocast:
                        metrics = task.evaluate(evaluated, step_generator(train_cfg.seed, step, 1), device)
                    row.update(world.share(metrics))  # rank 0's numbers, so every rank stops alike
                if evaluating or step % train_cfg.checkpoint_interval == 0 or interrupted:  # every checkpoint's step
                    check_finite(model, row, step)
                if evaluating:
                    if train_cfg.patience:
                        state["best_value"], state["since_best"] = plateau_step(
                            state["best_value"], state["since_best"], row[watched], train_cfg.min_delta, lower
                        )
                        if state["since_best"] == 0:  # a new best: keep its weights
                            state["best_step"] = step
                            if world.rank == 0:
                                save_atomic({"model": model.state_dict(), "step": step}, out / BEST)
                    bar.set_postfix({k: f"{v:.4f}" for k, v in row.items() if k.startswith("val_")}, refresh=False)
                row["time"] = time.perf_counter() - start_time
                if metrics_file is not None and (step % train_cfg.log_interval == 0 or "val_loss" in row):
                    write_row(metrics_file, row)
                    log_sinks.send(sinks, row)
                bar.set_description(f"{out.name} loss {train_loss:.4f}", refresh=False)
                bar.update()
                state["stopped"] = reached(row, train_cfg) or plateaued(state["since_best"], train_cfg.patience)
                if metrics_file is not None and (
                    step % train_cfg.checkpoint_interval == 0
                    or step == train_cfg.max_iters
                    or state["stopped"]
                    or interrupted
                ):
                    state["elapsed"], state["metrics_bytes"] = row["time"], metrics_file.tell()
                    sync_rows(metrics_file)
                    checkpoint(step)
                if interrupted:
                    raise Interrupted(out, step)
                if state["stopped"]:
                    break
        except BaseException as err:
            if isinstance(err, TrainingDiverged) and world.rank == 0:
                record_divergence(out, err, params, time.perf_counter() - start_time)
            log_sinks.close(sinks, finished=False)
            raise
        finally:
            bar.close()
            if metrics_file is not None:
                metrics_file.close()
    summary = None
    try:
        summary = finish(task, model, config, out, state, params, world) if world.rank == 0 else None
        if summary is not None:
            log_sinks.finish(sinks, summary, [out / "curves.png"])
    finally:
        log_sinks.close(sinks, finished=summary is not None)
    if interrupt["set"]:  # Ctrl-C after the last step's check: the run is whole, and the caller stops too
        raise KeyboardInterrupt(f"interrupted after the last step; {out} is finished")
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


def finished(out) -> bool:
    """Whether run `out` finished: its summary.json says status "finished" (a diverged run's says "diverged")."""
    summary = read_summary(Path(out) / "summary.json")
    return summary is not None and summary["status"] == "finished"


def reached(row, train):
    """Whether this evaluation row meets the early-stopping target (train.stop_metric reaches stop_value)."""
    value = row.get(train.stop_metric) if train.stop_metric else None
    if value is None:
        return False
    return value <= train.stop_value if lower_is_better(train.stop_metric) else value >= train.stop_value


def plateau_step(best: float | None, since: int, value: float, min_delta: float, lower: bool) -> tuple[float, int]:
    """(best, evaluations since it) after one more evaluation `value` under the plateau rule.

    `value` improves on `best` when it is below best - |best| min_delta (best (1 - min_delta) for the
    usual best >= 0), or above best + |best| min_delta when higher is better (`lower` False); the first
    evaluation (best None) always improves. An improvement becomes the best, 0 evaluations ago."""
    margin = 0.0 if best is None else abs(best) * min_delta
    improved = best is None or (value < best - margin if lower else value > best + margin)
    return (value, 0) if improved else (best, since + 1)


def plateaued(since: int, patience: int) -> bool:
    """Whether `since` evaluations without improvement end the run (patience 0: never)."""
    return 0 < patience <= since


def plateau(
    values: Sequence[float], patience: int, min_delta: float = 0.0, lower: bool = True
) -> tuple[bool, int | None]:
    """The plateau rule over evaluations `values`, oldest first: (whether it stops the run, index of the best).

    The run stops at the first evaluation that completes `patience` evaluations in a row without
    improvement (plateau_step), and the best is the last improving evaluation up to that one (None
    for no values); the training loop applies the same steps one evaluation at a time."""
    best, since, index = None, 0, None
    for position, value in enumerate(values):
        best, since = plateau_step(best, since, value, min_delta, lower)
        index = position - since
        if plateaued(since, patience):
            return True, index
    return False, index


def stop_reason(state: dict, train: TrainConfig) -> str:
    """What ended a run: "plateau" (the patience rule), "stop_metric" (its target), or "max_iters" (the cap)."""
    if not state["stopped"]:
        return "max_iters"
    return "plateau" if plateaued(state["since_best"], train.patience) else "stop_metric"


def finish(task, model, config, out, state, params, world):
    """curves.png, sample.txt (language models) and, last, summary.json from the finished run.

    seconds_per_step: forward, backward and update time per step, batch building included, over
    the steps after the first of each process (warm-up and compilation left out)."""
    rows = read_metrics(out / "metrics.jsonl")
    evals = [row for row in rows if "val_loss" in row]
    steps = rows[-1]["step"] if rows else 0  # max_iters, or fewer when early stopping ended the run
    seconds_per_step = state["train_seconds"] / state["timed_steps"] if state["timed_steps"] else state["first_seconds"]
    best = {m: (min if lower_is_better(m) else max)(row[m] for row in evals) for m in task.metrics}
    summary = {
        "status": "finished",
        "steps": steps,
        "params": params,
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
        **({"processes": world.size} if world.size > 1 else {}),
    }
    plot_training(
        rows,
        out / "curves.png",
        best_step=state["best_step"],
        title=f"{config.task.name}: {config.model.residual} / {config.model.kernel}",
    )
    if hasattr(task, "sample") and task.options.sample_length > 0:
        model.eval()
        device = next(model.parameters()).device
        generator = torch.Generator(device).manual_seed(step_generator(config.train.seed, steps, 2).initial_seed())
        rundir.write_file(out / "sample.txt", task.sample(model, generator, device))
    write_json(summary, out / "summary.json")  # last: its presence marks the run finished
    return summary
