"""The classical rows of one seed: each method's parameter tuned per round on the tuning instances
(bridge.selection.refine, the grids scored in batched runs), the polynomial filters fitted per degree, the
offline references, and the best classical rows chosen on the validation instances (bridge.selection.choose)
(docs/guide/bridge.md, "Transformers against the classical methods, round by round" and "One selection
protocol")."""

import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import networkx as nx
import numpy as np
import torch

import pdmm
from pdmm.methods import METHODS

from ..fastest_mixing import fastest_mixing_weights
from ..polynomial import apply_filter, fit_filter, nontrivial_spectrum, oracle_filters
from ..selection import choose, refine, two_runs
from .rows import (
    BEST,
    BEST_SAFE,
    FASTEST,
    FILTER,
    FILTER_UNGUARDED,
    OWN_INTERVAL,
    POLY_ORACLE,
    TUNED,
    Row,
    for_horizon,
    per_round,
)
from .runs import SeedRun, _Recorder, _round_errors, classical_errors, filter_errors, grid_errors, mean_log
from .seeds import SeedResult
from .setting import FILTER_ROUNDS, MIXING, TUNE_TOLERANCE, Compiled, Instance, Setting, compiled


def tune_classical(
    name: str,
    setting: Setting,
    tuning: Sequence[Compiled],
    validation: Sequence[Compiled],
    sets: dict[str, list[Compiled]],
    record: _Recorder,
    result: SeedResult,
) -> dict[int, float]:
    """Rows of classical method `name` (TUNED) tuned per round and for the last round on the tuning instances;
    returns the validation scores {round: mean log10 error} of its per-round choices, by which the best
    classical row is chosen (bridge.selection.choose). The parameter of each round is chosen by
    bridge.selection.refine, its grids scored on the tuning instances in batches (grid_errors); the values chosen
    run, again in batches, on the held-out and validation instances, each only as far as it is needed. What the
    tuning took is kept in result.fitted["tuning effort"]."""
    method, fixed, key, search = TUNED[name]
    row = per_round(name)
    rounds, R = setting.classical_rounds(), setting.rounds
    began = time.perf_counter()
    if search is None:  # nothing to tune: one setting
        values: list[Any] = [None]
        choice = dict.fromkeys(rounds, 0)
        effort = {"evaluations": 1, "levels": 0, "stopped by": "nothing to tune"}
    else:

        def score(parameters: list[Any], last: int) -> np.ndarray:
            return np.stack([mean_log(e) for e in grid_errors(method, fixed, key, parameters, last, tuning)])

        refined = refine(search, score, rounds, TUNE_TOLERANCE)
        points = list(dict.fromkeys(refined.choice.values()))
        values = [search.value(p) for p in points]
        choice = {r: points.index(p) for r, p in refined.choice.items()}
        effort = {"evaluations": refined.evaluations, "levels": refined.levels, "stopped by": refined.stopped_by}
        result.fitted[str(row.fitted_key)] = {r: _plain(values[g]) for r, g in choice.items()}
    needed: dict[int, int] = {}  # the chosen values the held-out sets run, and up to which round
    for r, g in choice.items():
        needed[g] = max(needed.get(g, 0), r)
    chosen = dict(needed)
    needed[choice[R]] = max(needed[choice[R]], R)
    for set_name, instances in sets.items():
        runs = chosen_runs(method, fixed, key, values, needed, instances)
        record.rounds(row.label, set_name, [runs[choice[r]][r - 1] for r in rounds], rounds)
        if key is not None:
            record.rounds(for_horizon(name, R).label, set_name, runs[choice[R]][:R])
    held = chosen_runs(method, fixed, key, values, chosen, validation)
    effort["instances"] = sum(a.shape[0] for *_, a in tuning)
    effort["seconds"] = time.perf_counter() - began
    result.fitted.setdefault("tuning effort", {})[row.label] = effort
    return {r: float(held[g][r - 1]) for r, g in choice.items()}


def chosen_runs(
    method: str,
    fixed: dict[str, Any],
    key: str | None,
    values: Sequence[Any],
    needed: dict[int, int],
    instances: Sequence[Compiled],
) -> dict[int, np.ndarray]:
    """{g: (rounds,) mean log10 errors} of values[g] run up to round needed[g] on `instances`, in two batched runs
    (grid_errors): the values needed only up to the smallest of those rounds' median, and the rest."""
    order = sorted(needed, key=lambda g: needed[g])
    cut = needed[order[len(order) // 2]]
    out = {}
    for batch in two_runs(order, needed, cut):
        last = max(needed[g] for g in batch)
        errors = grid_errors(method, fixed, key, [values[g] for g in batch], last, instances)
        out.update({g: mean_log(e) for g, e in zip(batch, errors, strict=True)})
    return out


def _plain(value: Any) -> float | list[float]:
    """A parameter as JSON: a float or a list of floats."""
    return [float(v) for v in value] if isinstance(value, tuple) else float(value)


def polynomial_rows(
    setting: Setting,
    tuning: Sequence[Instance],
    validation: Sequence[Instance],
    sets: dict[str, list[Instance]],
    record: _Recorder,
    result: SeedResult,
) -> dict[str, dict[int, float]]:
    """The fitted filter rows, with and without the safeguard, and the per-graph polynomial bound; returns the
    filters' validation scores {row: {round: score}}."""
    degrees = [r for r in setting.classical_rounds() if r <= FILTER_ROUNDS]
    spectra = [nontrivial_spectrum(pdmm.mixing_matrix(G, MIXING)) for G, *_ in tuning]
    filters = (FILTER, FILTER_UNGUARDED)
    fitted, seconds = {}, {}
    for row in filters:
        began = time.perf_counter()
        fitted[row.label] = {r: fit_filter(spectra, r, safeguard=not row.diverging) for r in degrees}
        seconds[row.label] = time.perf_counter() - began

    def fitted_of(row):
        return lambda W: {r: (lambda a, c=c: apply_filter(W, a, c)) for r, c in fitted[row.label].items()}

    def bound_of(W):
        return {r: (lambda a, f=f: f.apply(W, a)) for r, f in oracle_filters(nontrivial_spectrum(W), degrees).items()}

    for set_name, instances in sets.items():
        for row in filters:
            errors = filter_errors(fitted_of(row), instances)
            record.rounds(row.label, set_name, [float(mean_log(errors[r][None])[0]) for r in degrees], degrees)
        errors = filter_errors(bound_of, instances)
        record.rounds(POLY_ORACLE.label, set_name, [float(mean_log(errors[r][None])[0]) for r in degrees], degrees)
    for row in filters:
        result.fitted[row.coefficients_key] = {
            r: c.tolist() for r, c in fitted[row.label].items() if r in (1, setting.depth, setting.rounds)
        }
        result.fitted.setdefault("tuning effort", {})[row.label] = {
            "instances": sum(a.shape[0] for _, a, _ in tuning),
            "evaluations": len(degrees),
            "levels": 0,
            "stopped by": "exact fit per degree",
            "seconds": seconds[row.label],
        }
    return {
        row.label: {r: float(mean_log(e[None])[0]) for r, e in filter_errors(fitted_of(row), validation).items()}
        for row in filters
    }


def fastest_mixing_rows(
    setting: Setting, sets: dict[str, list[Compiled]], graphs: dict[str, list[nx.Graph]], record: _Recorder
) -> None:
    """FASTEST: Chebyshev acceleration with each held-out graph's fastest-mixing weights (bridge.fastest_mixing)
    over its own spectral interval, rounds 1..R. The weights and the interval need the whole graph offline, so
    the row is a reference beside the best classical row, never a candidate for it."""
    for set_name, instances in sets.items():
        errors = [
            _round_errors(
                METHODS["chebyshev"](graph, local, edges, None, mixing=fastest_mixing_weights(G)), a, setting.rounds
            )
            for (graph, local, edges, a), G in zip(instances, graphs[set_name], strict=True)
        ]
        record.errors(FASTEST.label, set_name, torch.cat(errors, dim=1))


def select_rows(
    row: Row,
    candidates: Sequence[str],
    scores: dict[str, dict[int, float]],
    rounds: Iterable[int],
    sets: Iterable[str],
    record: _Recorder,
    result: SeedResult,
) -> None:
    """Chosen row `row`: per round, the candidate (a label) with the smallest validation score there
    (bridge.selection.choose), its held-out values copied; the choices kept in result.fitted[row.choice_key]."""
    chosen = choose(scores, list(candidates), rounds)
    if not chosen:
        return
    rounds = sorted(chosen)
    for set_name in sets:
        record.rounds(row.label, set_name, [result.log_errors[(chosen[r], set_name)][r - 1] for r in rounds], rounds)
    result.fitted[row.choice_key] = chosen


def classical_rows(run: SeedRun, progress: Callable[[str], None]) -> dict[str, dict[int, float]]:
    """Every classical row of one seed on its held-out sets (TUNED per round and for round R, OWN_INTERVAL, FASTEST,
    the filters and the polynomial bound) and the rows BEST and BEST_SAFE chosen among them; `progress` is told
    each stage as it begins. Returns the candidates' validation scores {row: {round: score}}."""
    setting, sets, record, result = run.setting, run.sets, run.record, run.result
    compiled_sets, compiled_tuning = {name: compiled(inst) for name, inst in sets.items()}, compiled(run.tuning)
    compiled_validation = compiled(run.validation)
    scores: dict[str, dict[int, float]] = {}
    for name in TUNED:
        progress(f"tuning {name}")
        scores[per_round(name).label] = tune_classical(
            name, setting, compiled_tuning, compiled_validation, compiled_sets, record, result
        )
    for name, compiled_instances in compiled_sets.items():
        own = classical_errors("chebyshev", {"mixing": MIXING}, setting.rounds, compiled_instances)
        record.errors(OWN_INTERVAL.label, name, own)
    progress("fastest-mixing weights")
    fastest_mixing_rows(setting, compiled_sets, {name: [G for G, *_ in inst] for name, inst in sets.items()}, record)
    progress("polynomial filters")
    scores.update(polynomial_rows(setting, run.tuning, run.validation, sets, record, result))
    rounds = setting.classical_rounds()
    select_rows(BEST, BEST.chosen_from, scores, rounds, sets, record, result)
    select_rows(BEST_SAFE, BEST_SAFE.chosen_from, scores, rounds, sets, record, result)
    return scores
