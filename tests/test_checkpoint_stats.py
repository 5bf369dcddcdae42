"""checkpoint_stats.json: what a report read from a checkpoint, read back when the checkpoint is gone, and refused
with one line naming the file when it is not what a report writes (the file may come from someone else)."""

import json

import pytest

from experiments.checkpoint_stats import STATS_FILE, run_lambdas, run_probe
from experiments.errors import UsageError
from experiments.runs import Run

LAYERS = [{"phi_ratio": 0.5, "delta_ratio": float("nan")}, {"phi_ratio": 0.25, "delta_ratio": 1.0}]


def run_with(tmp_path, content):
    """A run directory without a checkpoint whose checkpoint_stats.json holds `content` (text or a JSON value)."""
    (tmp_path / STATS_FILE).write_text(content if isinstance(content, str) else json.dumps(content))
    return Run(path=tmp_path, config={}, metrics=[], summary=None, meta=None)


def test_stored_numbers_are_read_back_without_a_checkpoint(tmp_path):
    run = run_with(tmp_path, {"probe_batches": 4, "probe": LAYERS, "lambdas": [[0.7, 0.8], [0.5, 0.62]]})
    probe = run_probe(run)
    assert probe[0]["phi_ratio"] == 0.5 and probe[1] == {"phi_ratio": 0.25, "delta_ratio": 1.0}
    assert probe[0]["delta_ratio"] != probe[0]["delta_ratio"]  # NaN: a statistic undefined for a layer
    assert run_lambdas(run) == [(0.7, 0.8), (0.5, 0.62)]


def test_numbers_for_another_batch_count_or_absent_are_none(tmp_path):
    run = run_with(tmp_path, {"probe_batches": 8, "probe": LAYERS})
    assert run_probe(run, batches=4) is None and run_probe(run, batches=8) == run_probe(run, batches=8)
    assert run_lambdas(run) == []
    empty = Run(path=tmp_path / "none", config={}, metrics=[], summary=None, meta=None)
    assert run_probe(empty) is None and run_lambdas(empty) == []


@pytest.mark.parametrize(
    "content, problem",
    [
        ("{not json", "cannot read"),
        ([1, 2], "expected an object"),
        ({"probe": LAYERS}, "come together"),
        ({"probe_batches": 0, "probe": LAYERS}, "positive integer"),
        ({"probe_batches": True, "probe": LAYERS}, "positive integer"),
        ({"probe_batches": 4, "probe": [{"unknown": 1.0}]}, "probe must be"),
        ({"probe_batches": 4, "probe": [{"phi_ratio": "1"}]}, "probe must be"),
        ({"probe_batches": 4, "probe": [{"phi_ratio": 1e400}]}, "probe must be"),
        ({"probe_batches": 4, "probe": [{}] * 1001}, "probe must be"),
        ({"lambdas": [[0.5]]}, "lambdas must be"),
        ({"lambdas": [[0.5, True]]}, "lambdas must be"),
        ({"extra": 1}, "expected an object"),
    ],
)
def test_a_malformed_file_is_refused_naming_it(tmp_path, content, problem):
    run = run_with(tmp_path, content)
    for read in (run_probe, run_lambdas):
        with pytest.raises(UsageError, match=problem) as err:
            read(run)
        assert STATS_FILE in str(err.value) and "\n" not in str(err.value)
