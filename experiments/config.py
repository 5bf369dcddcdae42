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
from types import SimpleNamespace

from attention.config import KERNELS, AttentionConfig  # no torch: attention's layers are imported on first use
from attention.residuals import RESIDUALS

from .errors import UsageError


@dataclass
class TaskConfig:
    name: str = "char_lm"
    data: str = ""  # a text file for char_lm; unused by the other tasks
    options: dict = field(default_factory=dict)  # the task's own keys, checked by the task


NOT_CONFIG_KEYS = ("probe",)  # AttentionConfig fields that no config sets: bridge.probe turns probes on
EXPERIMENT_DEFAULTS = {"bias": False}  # where a config's default is not AttentionConfig's: nanoGPT's bias


def experiment_attention() -> AttentionConfig:
    """The AttentionConfig of a [model] table that sets no attention key: AttentionConfig's defaults but
    EXPERIMENT_DEFAULTS (docs/guide/training.md, "Configs")."""
    return AttentionConfig(**EXPERIMENT_DEFAULTS)


@dataclass
class ModelConfig:
    """The [model] table: n_layer, the layers' AttentionConfig, then the keys of the convex kinds.

    A config file writes the attention switches flat in [model], one key per AttentionConfig field but
    NOT_CONFIG_KEYS, named as the field (0 for a field's None: TOML has no None); they are read into `attention`,
    declared in AttentionConfig alone, with its defaults but EXPERIMENT_DEFAULTS (docs/guide/training.md,
    "Configs")."""

    n_layer: int = 4
    attention: AttentionConfig = field(default_factory=experiment_attention)
    kind: str = "transformer"  # "convex": ConvexTokenClassifier over fixed embeddings; "convex_blocks":
    # n_layer convex attention + FCN blocks over trained embeddings (docs/theory/convex.md section 8;
    # both task modular only)
    gates: int = 0  # convex kinds: fixed random ReLU gates h (0: one open gate)
    group_lasso: float = 0.0  # convex kinds: beta, the group-lasso weight added to the training loss


LEADING_KEYS = ("n_head", "d_model", "dropout", "bias")  # written right after n_layer (nanoGPT's order, that of
# every config.toml written so far); the other attention keys follow in AttentionConfig's order


def attention_keys() -> tuple[str, ...]:
    """The [model] keys that are AttentionConfig fields, in the fields' order: all but NOT_CONFIG_KEYS."""
    return tuple(f.name for f in dataclasses.fields(AttentionConfig) if f.name not in NOT_CONFIG_KEYS)


def optional_keys() -> frozenset[str]:
    """The attention keys whose field takes None, which a config writes as 0 (send_width)."""
    return frozenset(f.name for f in dataclasses.fields(AttentionConfig) if type(None) in typing.get_args(f.type))


def key_type(annotation: typing.Any) -> type:
    """The type a config key's value has: the field's type, without None for an optional field."""
    return next((arg for arg in typing.get_args(annotation) if arg is not type(None)), annotation)


def model_keys() -> dict[str, type]:
    """{key: type} of the [model] table in the order config files are written: n_layer, LEADING_KEYS, the other
    attention keys, then the convex kinds' keys."""
    attention = {f.name: key_type(f.type) for f in dataclasses.fields(AttentionConfig) if f.name in attention_keys()}
    own = {f.name: f.type for f in dataclasses.fields(ModelConfig) if f.name != "attention"}
    leading = {name: attention.pop(name) for name in LEADING_KEYS}
    return {"n_layer": own.pop("n_layer"), **leading, **attention, **own}


def model_tables(model: ModelConfig) -> dict[str, typing.Any]:
    """The [model] table of `model`, flat, in model_keys' order, 0 for an optional field's None."""
    values = {f.name: getattr(model, f.name) for f in dataclasses.fields(ModelConfig) if f.name != "attention"}
    values.update({name: getattr(model.attention, name) for name in attention_keys()})
    values.update({name: 0 for name in optional_keys() if values[name] is None})
    return {key: values[key] for key in model_keys()}


def model_from_table(values: dict[str, typing.Any]) -> ModelConfig:
    """ModelConfig from a flat [model] table of checked values (keys left out take their defaults), 0 read as None
    for an optional attention field; UsageError "[model]: ..." for a value AttentionConfig refuses, naming it."""
    own = {key: value for key, value in values.items() if key not in attention_keys()}
    switches = {key: value for key, value in values.items() if key in attention_keys()}
    switches.update({key: None for key in optional_keys() & set(switches) if switches[key] == 0})
    try:
        attention = AttentionConfig(**{**EXPERIMENT_DEFAULTS, **switches})
    except ValueError as err:
        raise UsageError(f"[model]: {err}") from None
    return ModelConfig(attention=attention, **own)


def attention_config(model: ModelConfig) -> AttentionConfig:
    """A copy of the AttentionConfig of a transformer's [model] table (a model that changes its layers' config, as
    bridge.probe turns probes on, leaves the run's config as it was); UsageError for a convex kind, which trains no
    transformer (docs/guide/training.md, "Configs")."""
    if model.kind != "transformer":
        raise UsageError(
            f"model.kind = {model.kind!r} is only available for task modular; this task trains transformers"
        )
    return dataclasses.replace(model.attention)


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
NON_NEGATIVE = {  # and every optional attention key (optional_keys: 0 stands for None)
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
    for table in TABLES:
        if not isinstance(tables.get(table, {}), dict):
            where = "--set" if any(key.startswith(f"{table}.") for key in overridden) else source
            raise UsageError(f"{where}: [{table}] must be a table of keys, got {tables[table]!r}")
        values, known = dict(tables.get(table, {})), table_keys(table)
        if table != "task":
            extra = set(values) - set(known)
            if extra:
                names = [f"{table}.{k}" for k in sorted(extra)]
                raise UsageError(
                    f"{'--set' if set(names) <= set(overridden) else source}: unknown key(s) "
                    f"{', '.join(names)}; [{table}] accepts {', '.join(known)}"
                )
        parts[table] = {
            key: checked(f"{table}.{key}", value, known[key]) if key in known else value
            for key, value in values.items()
        }
    defaults = to_tables(RunConfig())
    check_ranges({table: {**defaults[table], **values} for table, values in parts.items()})
    task = {key: value for key, value in parts["task"].items() if key in table_keys("task")}
    options = {key: value for key, value in parts["task"].items() if key not in task}
    return RunConfig(
        TaskConfig(**task, options=options), model_from_table(parts["model"]), TrainConfig(**parts["train"])
    )


def table_keys(table: str) -> dict[str, type]:
    """{key: type} of the keys [table] accepts, in the order config files are written ([task]: name and data; the
    task's own options are checked by the task)."""
    if table == "model":
        return model_keys()
    return {f.name: f.type for f in dataclasses.fields(TABLES[table]) if f.name != "options"}


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


def check_ranges(tables: dict[str, dict[str, typing.Any]]) -> None:
    """Sizes, rates and intervals > 0; NON_NEGATIVE ones >= 0; betas, dropout and min_delta below 1: UsageError
    naming the key otherwise. `tables`: the [model] and [train] tables, every key present, values of their types
    (before the model's AttentionConfig is made, so that each message names its key)."""
    model, train = SimpleNamespace(**tables["model"]), SimpleNamespace(**tables["train"])
    non_negative = NON_NEGATIVE | optional_keys()
    for table in ("model", "train"):
        for name, kind in table_keys(table).items():
            value = tables[table][name]
            if kind in (int, float):
                if name in non_negative and value < 0:
                    raise UsageError(f"{table}.{name} must be >= 0, got {value}")
                if name not in non_negative and name != "stop_value" and value <= 0:
                    raise UsageError(f"{table}.{name} must be > 0, got {value}")
    if train.seed > MAX_SEED:
        raise UsageError(f"train.seed must be an integer from 0 to 2^32 - 1, got {train.seed}")
    for name, value in (
        ("model.dropout", model.dropout),
        ("train.beta1", train.beta1),
        ("train.beta2", train.beta2),
        ("train.min_delta", train.min_delta),
    ):
        if value >= 1:
            raise UsageError(f"{name} must be < 1, got {value}")
    if model.send_width == 1 and model.kernel != "mean":
        raise UsageError(
            "model.send_width must be 0 (key and value d_model wide each) or >= 2, got 1 "
            '(1 needs model.kernel = "mean", which sends values only)'
        )
    for name, choices in (("residual", RESIDUALS), ("kernel", KERNELS)):
        if getattr(model, name) not in choices:
            raise UsageError(f"unknown model.{name} {getattr(model, name)!r}; choose one of {', '.join(choices)}")
    if model.kind not in MODEL_KINDS:
        raise UsageError(f"model.kind must be one of {', '.join(MODEL_KINDS)}, got {model.kind!r}")
    import torch  # here, not at the top: `pdmm-bridge configs` reads configs without torch

    try:
        kind = torch.device(train.device).type
    except RuntimeError:
        kind = None
    if kind not in DEVICE_TYPES:  # meta holds no data, and the trainer knows no other kind
        raise UsageError(
            f"train.device must be a torch device the trainer runs on (cpu, cuda or cuda:N), got {train.device!r}"
        )
    if train.min_lr > train.lr:
        raise UsageError(f"train.min_lr ({train.min_lr}) must not exceed train.lr ({train.lr})")


def to_tables(config):
    """{table: {key: value}} with task options folded back into [task] and [model] flat (model_tables)."""
    tables = {table: dataclasses.asdict(getattr(config, table)) for table in TABLES}
    tables["task"].update(tables["task"].pop("options"))
    tables["model"] = model_tables(config.model)
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
