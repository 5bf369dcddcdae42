"""Run configurations: TOML files with [task], [model] and [train] tables, mapped to dataclasses.

    config = load_config("shakespeare_char_cpu", ["model.residual=belief"])

A config is named by a file path or by the name of a built-in config, one shipped in the package's
experiments/configs/ ("shakespeare_char_cpu", "repro/belief_char"; `pdmm-bridge configs` lists them);
an existing file wins over a built-in of the same name.

Unknown tables or keys are errors; `--set table.key=value` overrides any key (the value is read
as a TOML value, so `2`, `0.5`, `true` and `"text"` or bare `text` all work). Task options (keys
of [task] other than name and data) are checked against the task's own Options dataclass.

A config file may also hold a [sweep] table (the grid, variants and seeds `pdmm-bridge sweep` runs
when none are given on its command line) and a [report] table (what `pdmm-bridge report` says
about the sweep); `load_plan` reads those two, `load_config` leaves them out of the run config.
"""

import dataclasses
import json
import math
import numbers
import re
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from .errors import UsageError

if typing.TYPE_CHECKING:
    from attention import AttentionConfig


@dataclass
class TaskConfig:
    name: str = "char_lm"
    data: str = ""  # a text file for char_lm; unused by the other tasks
    options: dict = field(default_factory=dict)  # the task's own keys, checked by the task


@dataclass
class ModelConfig:
    """The [model] table: n_layer, the attention switches, then the keys of the convex kinds.

    Every attention.AttentionConfig field but NOT_CONFIG_KEYS is a key of the same name (attention_config builds the
    layers' AttentionConfig from them, so a new AttentionConfig field needs only its key and default here), with
    AttentionConfig's default except bias (false, nanoGPT's) and send_width (0 for None: TOML has no None).
    tests/test_train.py checks that the keys cover the fields (docs/guide/training.md, "Configs")."""

    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0
    bias: bool = False
    residual: str = "standard"
    gamma: float = 1.0
    beta: float = 1.0
    kernel: str = "softmax"
    symmetric: bool = False
    self_loops: bool = True  # false: no token attends to itself (ViT only; AttentionX's ViT setting)
    send_width: int = 0  # numbers a token sends each neighbour per layer: keys send_width // 2 wide,
    # values the rest (0: key and value d_model wide each, 2 d_model;
    # kernel "mean" sends values only, send_width >= 1 wide)
    kind: str = "transformer"  # "convex": ConvexTokenClassifier over fixed embeddings; "convex_blocks":
    # n_layer convex attention + FCN blocks over trained embeddings (docs/theory/convex.md section 8;
    # both task modular only)
    gates: int = 0  # convex kinds: fixed random ReLU gates h (0: one open gate)
    group_lasso: float = 0.0  # convex kinds: beta, the group-lasso weight added to the training loss


NOT_CONFIG_KEYS = ("probe",)  # AttentionConfig fields that no config sets: bridge.probe turns probes on


def attention_keys() -> tuple[str, ...]:
    """The [model] keys that are attention.AttentionConfig fields, in the fields' order: all but NOT_CONFIG_KEYS."""
    from attention import AttentionConfig  # here, not at the top: `pdmm-bridge configs` reads configs without torch

    return tuple(f.name for f in dataclasses.fields(AttentionConfig) if f.name not in NOT_CONFIG_KEYS)


def attention_config(model: ModelConfig) -> "AttentionConfig":
    """The attention.AttentionConfig of a transformer's [model] table: each field of attention_keys() from the key
    of its name, 0 read as None where the field takes None (send_width); UsageError for a convex kind or for a
    value AttentionConfig refuses, naming it (docs/guide/training.md, "Configs")."""
    from attention import AttentionConfig

    if model.kind != "transformer":
        raise UsageError(
            f"model.kind = {model.kind!r} is only available for task modular; this task trains transformers"
        )
    optional = {f.name for f in dataclasses.fields(AttentionConfig) if type(None) in typing.get_args(f.type)}
    values = {name: getattr(model, name) for name in attention_keys()}
    values.update({name: None for name in optional & set(values) if values[name] == 0})
    try:
        return AttentionConfig(**values)
    except ValueError as err:
        raise UsageError(f"[model]: {err}") from None


@dataclass
class TrainConfig:
    max_iters: int = 2000
    batch_size: int = 12  # 0: the whole training set every step (full batch)
    block_size: int = 64
    lr: float = 1e-3
    min_lr: float = 1e-4  # cosine decay from lr to min_lr over max_iters, after warm-up
    warmup_iters: int = 100
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # 0: no clipping
    eval_interval: int = 250
    eval_iters: int = 20
    log_interval: int = 1
    checkpoint_interval: int = 250
    seed: int = 0
    device: str = "cpu"
    compile: bool = False
    stop_metric: str = ""  # e.g. "val_acc": stop at the first evaluation where it reaches stop_value
    stop_value: float = 0.0
    patience: int = 0  # 0: off; else stop after this many evaluations in a row without improvement
    min_delta: float = 0.0  # an improvement beats the best so far by more than this fraction of it
    plateau_metric: str = ""  # what patience watches; "": the task's first metric (val_loss)
    memory_check: bool = True  # refuse a config whose estimated memory exceeds what the device has
    # available (experiments/memory.py); false: try anyway


@dataclass
class RunConfig:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


TABLES = {"task": TaskConfig, "model": ModelConfig, "train": TrainConfig}
PLAN_TABLES = ("sweep", "report")
NON_NEGATIVE = {
    "batch_size",
    "warmup_iters",
    "weight_decay",
    "grad_clip",
    "min_lr",
    "dropout",
    "seed",
    "gamma",
    "beta",
    "gates",
    "group_lasso",
    "send_width",
    "patience",
    "min_delta",
}
MODEL_KINDS = ("transformer", "convex", "convex_blocks")
DEVICE_TYPES = ("cpu", "cuda")  # the devices train.device may name
MAX_SEED = 2**32 - 1  # train.seed seeds scikit-learn (digits' split), numpy and torch: the range all of them take
MAX_INT = 2**31 - 1  # the largest magnitude of any other integer key (sizes, counts, steps): a 32-bit integer, so
# no size overflows the 64-bit integers torch computes tensor sizes in (docs/guide/training.md, "Limits")


CONFIG_DIR = Path(__file__).parent / "configs"


def builtin_configs():
    """{name: path} of the built-in configs, named by their path under CONFIG_DIR without .toml."""
    paths = sorted(CONFIG_DIR.rglob("*.toml"))
    return {path.relative_to(CONFIG_DIR).with_suffix("").as_posix(): path for path in paths}


def config_path(name):
    """The config file `name` names: an existing file, else the built-in config of that name (.toml optional)."""
    path = Path(name)
    if path.is_file():
        return path
    builtin = builtin_configs().get(path.as_posix().removesuffix(".toml"))
    if builtin is None:
        raise UsageError(
            f"config file not found: {name} is neither a file nor a built-in config (`pdmm-bridge configs` lists them)"
        )
    return builtin


def description(path):
    """A config's one-line description: its opening comment up to the first ': ' or '. '."""
    lines = []
    for line in Path(path).read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return re.split(r"[:.]\s", " ".join(lines) + " ", maxsplit=1)[0].strip()


def read_tables(path):
    """{table: {key: value}} of a config (a file or a built-in name); UsageError when missing or not TOML."""
    path = config_path(path)
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise UsageError(f"{path} is not valid TOML: {err}") from None
    except RecursionError:
        raise UsageError(f"{path} is not valid TOML: nested too deeply") from None


def load_config(path, overrides=()):
    """Read a TOML config file and apply `table.key=value` overrides; raise UsageError on any bad key or value."""
    tables = {name: table for name, table in read_tables(path).items() if name not in PLAN_TABLES}
    for override in overrides:
        apply_override(tables, override)
    return from_tables(tables, source=str(path), overridden={o.partition("=")[0].strip() for o in overrides})


def load_plan(path):
    """The file's [sweep] and [report] tables as {"sweep": {...}, "report": {...}} (empty when absent)."""
    tables = read_tables(path)
    plan = {name: tables.get(name, {}) for name in PLAN_TABLES}
    for name, table in plan.items():
        if not isinstance(table, dict):
            raise UsageError(f"{path}: [{name}] must be a table")
    return plan


def apply_override(tables, override):
    """Set tables[table][key] from "table.key=value"."""
    name, sep, text = override.partition("=")
    table, dot, key = name.strip().partition(".")
    if not (sep and dot and key):
        raise UsageError(f"--set expects table.key=value (e.g. model.residual=belief), got {override!r}")
    try:
        value = tomllib.loads(f"value = {text.strip()}")["value"]
    except tomllib.TOMLDecodeError:
        value = text.strip()  # a bare word: a string
    except RecursionError:
        raise UsageError(f"--set {name.strip()}: the value is nested too deeply") from None
    target = tables.setdefault(table, {})
    if not isinstance(target, dict):
        raise UsageError(f"--set {name.strip()}: [{table}] in the config is {target!r}, not a table of keys")
    target[key] = value


def from_tables(tables, source="config", overridden=()):
    """RunConfig from {table: {key: value}}, with types and ranges checked.

    overridden: the table.key names set by --set, which unknown-key errors blame instead of `source`."""
    unknown = set(tables) - set(TABLES)
    if unknown:
        from_set = all(any(key.startswith(f"{table}.") for key in overridden) for table in unknown)
        raise UsageError(
            f"{'--set' if from_set else source}: unknown table(s) {sorted(unknown)}; expected {list(TABLES)}"
        )
    parts = {}
    for table, cls in TABLES.items():
        if not isinstance(tables.get(table, {}), dict):
            where = "--set" if any(key.startswith(f"{table}.") for key in overridden) else source
            raise UsageError(f"{where}: [{table}] must be a table of keys, got {tables[table]!r}")
        values = dict(tables.get(table, {}))
        known = {f.name: f for f in dataclasses.fields(cls) if f.name != "options"}
        if cls is TaskConfig:
            values["options"] = {k: values.pop(k) for k in list(values) if k not in known}
        else:
            extra = set(values) - set(known)
            if extra:
                names = [f"{table}.{k}" for k in sorted(extra)]
                raise UsageError(
                    f"{'--set' if set(names) <= set(overridden) else source}: unknown key(s) "
                    f"{', '.join(names)}; [{table}] accepts {', '.join(known)}"
                )
        for key, value in values.items():
            if key != "options":
                values[key] = checked(f"{table}.{key}", value, known[key].type)
        parts[table] = cls(**values)
    config = RunConfig(**parts)
    check_ranges(config)
    return config


KINDS = {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}


def checked(name, value, kind):
    """value if it has the field's type (an int is accepted for a float), else UsageError; an integer must lie
    within +-MAX_INT (train.seed: 0..MAX_SEED, which check_ranges checks)."""
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        if ok and name != "train.seed" and abs(value) > MAX_INT:
            raise UsageError(f"{name} must be an integer from {-MAX_INT} to {MAX_INT}, got {value}")
    elif kind is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise UsageError(f"{name} must be {KINDS[kind]}, got {value!r}")
    return float(value) if kind is float else value


def check_ranges(config):
    """Sizes, rates and intervals > 0; NON_NEGATIVE ones >= 0; betas, dropout and min_delta below 1."""
    for table in ("model", "train"):
        for f in dataclasses.fields(TABLES[table]):
            value = getattr(getattr(config, table), f.name)
            if f.type in (int, float):
                if f.name in NON_NEGATIVE and value < 0:
                    raise UsageError(f"{table}.{f.name} must be >= 0, got {value}")
                if f.name not in NON_NEGATIVE and f.name != "stop_value" and value <= 0:
                    raise UsageError(f"{table}.{f.name} must be > 0, got {value}")
    if config.train.seed > MAX_SEED:
        raise UsageError(f"train.seed must be an integer from 0 to 2^32 - 1, got {config.train.seed}")
    for name, value in (
        ("model.dropout", config.model.dropout),
        ("train.beta1", config.train.beta1),
        ("train.beta2", config.train.beta2),
        ("train.min_delta", config.train.min_delta),
    ):
        if value >= 1:
            raise UsageError(f"{name} must be < 1, got {value}")
    if config.model.send_width == 1 and config.model.kernel != "mean":
        raise UsageError(
            "model.send_width must be 0 (key and value d_model wide each) or >= 2, got 1 "
            '(1 needs model.kernel = "mean", which sends values only)'
        )
    if config.model.kind not in MODEL_KINDS:
        raise UsageError(f"model.kind must be one of {', '.join(MODEL_KINDS)}, got {config.model.kind!r}")
    import torch  # here, not at the top: `pdmm-bridge configs` reads configs without torch

    try:
        kind = torch.device(config.train.device).type
    except RuntimeError:
        kind = None
    if kind not in DEVICE_TYPES:  # meta holds no data, and the trainer knows no other kind
        raise UsageError(
            f"train.device must be a torch device the trainer runs on (cpu, cuda or cuda:N), "
            f"got {config.train.device!r}"
        )
    if config.train.min_lr > config.train.lr:
        raise UsageError(f"train.min_lr ({config.train.min_lr}) must not exceed train.lr ({config.train.lr})")


def to_tables(config):
    """{table: {key: value}} with task options folded back into [task]."""
    tables = {table: dataclasses.asdict(getattr(config, table)) for table in TABLES}
    tables["task"].update(tables["task"].pop("options"))
    return tables


def to_toml(config):
    """The resolved config as TOML text (flat tables of scalars and lists)."""
    lines = []
    for table, values in to_tables(config).items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {toml_value(value)}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)


def toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a valid TOML basic string (escapes included)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return repr(value)


def overrides_with_data(overrides, data):
    """The --set overrides, plus task.data from a command's --data option (None: none)."""
    return [*overrides, *([f"task.data={toml_value(data)}"] if data else [])]
