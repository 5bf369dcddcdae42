"""A training run's checkpoints: their names, and how one is read and checked before it is used.

    checkpoint = load_checkpoint("runs/mod97/ckpt.pt", ("model", "state"))

A checkpoint holds only tensors, numbers, strings, lists and dicts and is read with
torch.load(weights_only=True), so opening a run directory from someone else never unpickles code; a resume
takes the newest checkpoint of the run whose identity (run id, config hash), state and metrics rows check out
(usable_checkpoint; docs/guide/runs.md, "A checkpoint is checked before it is used").
"""

import hashlib
import io
import json
import math
import pickle
import sys
import warnings
from pathlib import Path

import torch

from bridge.fitting import plateaued

from . import rundir
from .config import TrainConfig, load_config, to_tables
from .errors import UsageError, first_line
from .memory import available_bytes
from .runs import is_number, parse_metrics, read_meta

CHECKPOINT, PREVIOUS = "ckpt.pt", "ckpt.prev.pt"  # the newest checkpoint, and the one before it
BEST = "best.pt"  # the model weights at the best evaluation, kept under the plateau rule (train.patience > 0)
EXTENDABLE = ("max_iters", "warmup_iters", "lr", "min_lr")  # [train] keys --extend may change: the schedule


class UnsafeCheckpoint(UsageError):
    """A checkpoint that needs pickle: crafted or from another program, never a crash's leftover; not skipped."""


class ForeignCheckpoint(UsageError):
    """A checkpoint of another run (its run id or config hash differs from the run's): never resumed from."""


def has_checkpoint(out):
    """Whether run directory `out` holds a checkpoint to resume from (ckpt.pt or ckpt.prev.pt)."""
    return any((Path(out) / name).is_file() for name in (CHECKPOINT, PREVIOUS))


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
