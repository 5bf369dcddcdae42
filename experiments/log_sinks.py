"""Logging sinks: the rows a training run writes to metrics.jsonl, also sent to TensorBoard, Weights & Biases or
MLflow (`pdmm-bridge train|sweep --log NAME`, docs/guide/training.md, "Dashboards").

    target = LogTarget(("tensorboard",), root=Path("runs/sweep"), experiment="sweep")
    sinks = open_sinks(target, out, config_text, tables, run_id, first_step)
    for row in rows: send(sinks, row)
    finish(sinks, summary, [out / "curves.png"])

Each sink gets every row metrics.jsonl gets, the run's config at the start, and its summary and figures at the
end. metrics.jsonl stays the record: a sink that fails in the middle of a run is reported in one line and
dropped, and the run goes on. Each library is imported only when its sink is asked for (check_available, before
any training), and each writes under the directory the user named:

- tensorboard: RUN/tensorboard (one event directory per run; point TensorBoard at a sweep's directory to see
  its runs side by side). A resumed run purges the events from its first new step on (SummaryWriter's
  purge_step), so the steps it re-runs are not shown twice.
- wandb: a run of project EXPERIMENT, its files under RUN/wandb; its id is the run directory's run id, so a
  resumed run continues the same W&B run. Online or offline as wandb is set up (WANDB_MODE=offline writes
  locally, for `wandb sync` later).

TensorBoard and wandb write by path. Each is handed a path through the run directory's descriptor,
/proc/PID/fd/FD (SinkFolder), so their files land in the directory the run opened even when --out is renamed
and a link put in its place mid-run; where /proc does not show descriptors (macOS) they get the checked path
RUN/tensorboard or RUN, which a rename can redirect. Their folder is opened through the descriptor (a link there
is refused), and what they wrote is recorded in the marker as the sink closes (rundir.adopt), so `train --force`
removes it and a file planted there before is still refused (docs/guide/runs.md, "Output directories").
- mlflow: a run of experiment EXPERIMENT, tagged with the run id, in the tracking store MLFLOW_TRACKING_URI names,
  or else a file store ROOT/mlruns (ROOT: the run's directory, or the sweep's); a resumed run continues the
  MLflow run with its tag.
"""

import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import rundir
from .errors import UsageError

SINKS = ("tensorboard", "wandb", "mlflow")
EXTRAS = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}  # the optional extra of each
TAG = "pdmm_bridge.run_id"  # the MLflow tag that names a run directory's run


@dataclass(frozen=True)
class LogTarget:
    """Where a run's rows also go.

    Attributes
    ----------
    sinks : tuple of str
        Names from SINKS, each at most once.
    root : Path
        The directory the user named: the run's (train) or the sweep's (sweep); the default MLflow store is
        ROOT/mlruns.
    experiment : str
        The W&B project and MLflow experiment: the run's or the sweep's directory name.
    """

    sinks: tuple[str, ...]
    root: Path
    experiment: str


def check_available(names: Sequence[str]) -> None:
    """UsageError naming the missing package and its extra, for a sink whose library cannot be imported.

    Parameters
    ----------
    names : sequence of str
        Sink names from SINKS.

    Raises
    ------
    UsageError
        For a name not in SINKS or a library that is not installed.
    """
    modules = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
    for name in names:
        if name not in SINKS:
            raise UsageError(f"--log must be one of {', '.join(SINKS)}, got {name!r}")
        try:
            __import__(modules[name])
        except ImportError:
            raise UsageError(
                f'--log {name} needs the {name} package: pip install "pdmm-bridge[{EXTRAS[name]}]"'
            ) from None


def add_argument(parser: Any, what: str = "every logged row") -> None:
    """Add --log (repeatable, one of SINKS) to a command's parser; `what` says what is sent.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The command's parser.
    what : str
        What the dashboards get, for the help text.
    """
    parser.add_argument(
        "--log",
        action="append",
        default=[],
        choices=SINKS,
        help=f"also send {what}, the config, summary and figures to this dashboard (repeatable; "
        "docs/guide/training.md, Dashboards)",
    )


def target(names: Sequence[str], root: Path) -> "LogTarget | None":
    """The LogTarget of a command's --log names (duplicates dropped) under the directory `root` it writes,
    after check_available; None without names.

    Parameters
    ----------
    names : sequence of str
        The --log values.
    root : Path
        The run, sweep or comparison directory the user named.

    Returns
    -------
    LogTarget or None

    Raises
    ------
    UsageError
        As check_available.
    """
    check_available(names)
    return LogTarget(tuple(dict.fromkeys(names)), root, root.name) if names else None


class Sink:
    """One destination: row() for every metrics row, finish() with the summary and figures, close() always."""

    name = ""

    def row(self, row: dict[str, Any]) -> None:
        raise NotImplementedError

    def finish(self, summary: dict[str, Any], figures: Sequence[Path]) -> None:
        raise NotImplementedError

    def close(self, finished: bool) -> None:
        raise NotImplementedError


def _numbers(row: dict[str, Any]) -> dict[str, float]:
    """The row's numeric entries but the step (bools and non-finite values left out)."""
    return {
        key: float(value)
        for key, value in row.items()
        if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) < 1e308
    }


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"final.val_loss": ..., "model.kernel": ...} from nested dicts."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


class SinkFolder:
    """Folder `name` of the run directory `out` this command holds, opened through the run's descriptor (made if
    absent; a link there, or anywhere under it, is refused), with what it held when the sink began, so that `adopt`
    records only what the library wrote since."""

    def __init__(self, out: Path, name: str):
        run = rundir.held(out)
        if run is None:
            raise UsageError(f"{out} is not an output directory this command holds")
        self.run, self.directory = run, run.subdir(name)
        link = rundir.first_link(self.directory)
        if link is not None:  # the library would follow it out of the run directory
            raise UsageError(f"{link} is a link; {name} writes only inside {out}: remove it")
        self.before = rundir.unowned(self.directory)
        self.path = self.directory.proc_path() or str(out / name)  # where /proc is absent: the checked path
        self.run_path = run.proc_path() or str(out)

    def adopt(self) -> None:
        """Record in the run's marker what the library wrote into the folder (rundir.adopt)."""
        rundir.adopt(self.directory, self.before)


class TensorBoardSink(Sink):
    """Scalars per row, the config and summary as text, the figures as images, in RUN/tensorboard."""

    name = "tensorboard"

    def __init__(self, out: Path, config_text: str, first_step: int):
        from torch.utils.tensorboard import SummaryWriter

        self.folder = SinkFolder(out, "tensorboard")
        self.writer = SummaryWriter(log_dir=self.folder.path, purge_step=first_step if first_step > 1 else None)
        if first_step <= 1:
            self.writer.add_text("config", "    " + config_text.replace("\n", "\n    "), 0)

    def row(self, row):
        for key, value in _numbers(row).items():
            self.writer.add_scalar(key, value, row["step"])

    def finish(self, summary, figures):
        import matplotlib.image

        step = int(summary.get("steps", 0))
        self.writer.add_text("summary", "    " + json.dumps(summary, indent=2).replace("\n", "\n    "), step)
        for figure in figures:
            self.writer.add_image(figure.stem, matplotlib.image.imread(figure)[..., :3], step, dataformats="HWC")

    def close(self, finished):
        try:
            self.writer.close()
        finally:
            self.folder.adopt()


class WandbSink(Sink):
    """A W&B run (id: the run id) with the config, a log call per row, the summary and figures at the end."""

    name = "wandb"

    def __init__(self, out: Path, target: LogTarget, tables: dict, run_id: str):
        import wandb

        self.folder = SinkFolder(out, "wandb")
        self.wandb = wandb
        self.run = wandb.init(
            project=target.experiment,
            name=out.name,
            id=run_id,
            resume="allow",
            dir=self.folder.run_path,  # wandb writes into DIR/wandb, the folder
            config=_flat(tables),
        )

    def row(self, row):
        self.run.log(_numbers(row), step=int(row["step"]))

    def finish(self, summary, figures):
        self.run.summary.update(_flat(summary))
        self.run.log({figure.stem: self.wandb.Image(str(figure)) for figure in figures})

    def close(self, finished):
        try:
            self.run.finish(exit_code=0 if finished else 1)
        finally:
            self.folder.adopt()


class MLflowSink(Sink):
    """An MLflow run tagged with the run id: config.toml and the flattened config as params, a metric batch per
    row, summary.json and the figures as artifacts."""

    name = "mlflow"

    def __init__(self, out: Path, target: LogTarget, config_text: str, tables: dict, run_id: str):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:
            store = target.root / "mlruns"
            rundir.refuse_link(store)
            uri = store.resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 asks before using a file store
        self.client = client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name(target.experiment)
        experiment_id = experiment.experiment_id if experiment else client.create_experiment(target.experiment)
        found = client.search_runs([experiment_id], filter_string=f"tags.`{TAG}` = '{run_id}'", max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            client.update_run(self.run_id, status="RUNNING")
        else:
            self.run_id = client.create_run(experiment_id, run_name=out.name, tags={TAG: run_id}).info.run_id
            client.log_text(self.run_id, config_text, "config.toml")
            params = [Param(key, str(value)[:500]) for key, value in _flat(tables).items()]
            for start in range(0, len(params), 100):  # MLflow takes at most 100 params per batch
                client.log_batch(self.run_id, params=params[start : start + 100])

    def row(self, row):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, value, now, int(row["step"])) for key, value in _numbers(row).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def finish(self, summary, figures):
        self.client.log_dict(self.run_id, summary, "summary.json")
        for figure in figures:
            self.client.log_artifact(self.run_id, str(figure))

    def close(self, finished):
        self.client.set_terminated(self.run_id, status="FINISHED" if finished else "KILLED")


def open_sinks(
    target: LogTarget | None, out: Path, config_text: str, tables: dict, run_id: str, first_step: int
) -> list[Sink]:
    """The sinks of `target` for the run in `out`, opened (a W&B or MLflow run started or resumed).

    Parameters
    ----------
    target : LogTarget or None
        What to open; None opens nothing.
    out : Path
        The run directory.
    config_text : str
        Its config.toml.
    tables : dict
        Its config as {table: {key: value}}.
    run_id : str
        Its run id (meta.json), which names it in W&B and MLflow.
    first_step : int
        The first step this process trains (> 1 on resume).

    Returns
    -------
    list of Sink

    Raises
    ------
    UsageError
        Where a sink cannot be opened (its message names the sink).
    """
    if target is None:
        return []
    sinks: list[Sink] = []
    for name in target.sinks:
        try:
            if name == "tensorboard":
                sinks.append(TensorBoardSink(out, config_text, first_step))
            elif name == "wandb":
                sinks.append(WandbSink(out, target, tables, run_id))
            else:
                sinks.append(MLflowSink(out, target, config_text, tables, run_id))
        except UsageError:
            close(sinks, finished=False)
            raise
        except Exception as err:  # each library raises its own types
            close(sinks, finished=False)
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            raise UsageError(f"--log {name}: could not start logging for {out}: {reason}") from None
    return sinks


def _guarded(sinks: list[Sink], action: str, call: Any) -> None:
    """call(sink) for every sink; one that raises is reported in one line and removed from `sinks`."""
    for sink in list(sinks):
        try:
            call(sink)
        except Exception as err:  # a dashboard's failure must not cost the run; metrics.jsonl holds every row
            reason = (str(err).strip().splitlines() or [type(err).__name__])[0]
            print(f"pdmm-bridge: --log {sink.name} stopped ({action}): {reason}", file=sys.stderr)
            sinks.remove(sink)


def send(sinks: list[Sink], row: dict[str, Any]) -> None:
    """Send one metrics row to every sink."""
    _guarded(sinks, "logging a row", lambda sink: sink.row(row))


def finish(sinks: list[Sink], summary: dict[str, Any], figures: Sequence[Path]) -> None:
    """Send the summary and the figures that exist to every sink."""
    shown = [figure for figure in figures if figure.is_file()]
    _guarded(sinks, "logging the summary", lambda sink: sink.finish(summary, shown))


def close(sinks: list[Sink], finished: bool) -> None:
    """Close every sink (a W&B or MLflow run marked finished, or stopped)."""
    _guarded(sinks, "closing", lambda sink: sink.close(finished))
