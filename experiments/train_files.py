"""A training run's directory outside its steps: claiming it (prepare_directory), a new run's config.toml and
meta.json (start_run), and what a resume checks and rewrites first (resume_changes, extension, reopen), as
docs/guide/runs.md describes.

    out = prepare_directory("runs/mod97", resume=False, force=False)
"""

import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import torch
import torch.distributed as dist

from . import rundir
from .checkpoints import BEST, CHECKPOINT, EXTENDABLE, PREVIOUS, has_checkpoint, run_identity
from .config import from_tables, to_tables, to_toml
from .errors import UsageError, package_version
from .runs import read_meta, read_summary, read_toml
from .stopping import stop_reason

RUN_FILES = ("config.toml", "metrics.jsonl", CHECKPOINT, PREVIOUS)  # what marks a directory as a run
WRITES = (*RUN_FILES, BEST, "meta.json", "summary.json", "curves.png", "sample.txt")  # what a run writes and replaces


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


def git_commit():
    """The commit of the checkout the package runs from, or None."""
    try:
        root = Path(__file__).resolve().parent.parent
        return subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def write_json(obj, path):
    """obj as indented JSON in `path` (rundir.write_file); NaN or infinity is a ValueError, never written."""
    rundir.write_file(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def finished(out) -> bool:
    """Whether run `out` finished: its summary.json says status "finished" (a diverged run's says "diverged")."""
    summary = read_summary(Path(out) / "summary.json")
    return summary is not None and summary["status"] == "finished"


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
