"""pdmm.draws: SplitMix64 against its published outputs, the numba kernel and the torch expression against
the pure-Python reference bit for bit, the draws' distribution, and whole runs equal on both paths, numba loaded
only when a kernel is first needed and its absence a fallback to torch."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from extras import needs_extra
from scipy.stats import binomtest, chisquare, kstest

import pdmm
from pdmm import draws
from pdmm.network import Network

LOSSY_RUN = """
import sys
if sys.argv[1] == "absent":
    sys.modules["numba"] = None  # `import numba` raises ModuleNotFoundError, as where it is not installed
import numpy as np
import pdmm
at_import = sys.modules.get("numba") is not None
problem = pdmm.averaging(pdmm.topology("random_geometric", n=25, seed=3), np.arange(25.0).reshape(25, 1))
x = pdmm.solve(problem, max_iter=40, tol=0, network=pdmm.Network(drop=0.2, wake=0.8, seed=4)).x
print(at_import, pdmm.draws.numba_kernels() is not None)
np.save(sys.argv[2], x)
"""
KEYS = [0, 1, (1 << 63) - 1, 1 << 63, (1 << 64) - 1, draws.stream_key(0, 0, 0), draws.stream_key(7, 3, 10**6)]


def test_the_reference_is_splitmix64():
    """The first five outputs of SplitMix64 from the state 1234567 (the test vector of its C reference)."""
    assert [draws.mix((1234567 + (t + 1) * draws.GAMMA) & draws.MASK) for t in range(5)] == [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
        4593380528125082431,
        16408922859458223821,
    ]


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("key", KEYS)
def test_kernel_and_torch_expression_draw_the_reference_bits(key, kernel):
    count = 1000
    u = np.array([draws.uniform(key, t) for t in range(count)], dtype=np.int64)
    for bound in (0, 1, draws.bound(0.3), 2**31, draws.bound(1.0)):
        expected = u < bound
        assert np.array_equal(draws.below(key, count, bound, "cpu", kernel=kernel).numpy(), expected)
    bounds = torch.from_numpy(np.random.default_rng(0).integers(0, 2**32 + 1, count))
    assert np.array_equal(draws.below(key, count, bounds, "cpu", kernel=kernel).numpy(), u < bounds.numpy())


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
def test_below_at_reads_the_trials_of_below_per_index(kernel, batch):
    """An event of node (or undirected edge) i read off per directed edge: trial index[e] B + b of the stream."""
    key, bound = draws.stream_key(2, 1, 9), draws.bound(0.4)
    index = torch.randint(50, (300,), generator=torch.Generator().manual_seed(batch), dtype=torch.int32)
    whole = np.array([draws.uniform(key, t) < bound for t in range(50 * batch)]).reshape(50, batch)
    at = draws.below_at(key, index, bound, batch, "cpu", kernel=kernel).view(-1, batch).numpy()
    assert np.array_equal(at, whole[index.numpy()])


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
def test_below_each_at_reads_the_trials_of_below_per_index_against_their_own_bounds(kernel, batch):
    """Trial index[e] B + b against bounds[e B + b]: the draws of `below` over the items' trials, the per-node wake
    and per-edge loss of a part of a graph."""
    key = draws.stream_key(4, 2, 7)
    index = torch.randint(40, (200,), generator=torch.Generator().manual_seed(batch), dtype=torch.int32)
    bounds = torch.from_numpy(np.random.default_rng(batch).integers(0, 2**32 + 1, 200 * batch))
    u = np.array([[draws.uniform(key, i * batch + b) for b in range(batch)] for i in index.tolist()])
    at = draws.below_each_at(key, index, bounds, batch, "cpu", kernel=kernel).view(-1, batch).numpy()
    assert np.array_equal(at, u < bounds.numpy().reshape(-1, batch))


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("dtype, bits", [(torch.float64, 53), (torch.float32, 24)])
def test_fractions_and_normals_are_the_reference_bits_of_each_entry(dtype, bits, kernel, monkeypatch):
    """Entry (e, b, k) of rows of w numbers is trial (index[e] B + b) w + k: the top p bits of the 64 of
    SplitMix64's output, over 2^p; normals: Box-Muller of two streams' at the same entry."""
    if not kernel:
        monkeypatch.setattr(draws, "NUMBA", False)
    key, angle, B, w = draws.stream_key(3, 7, 0), draws.stream_key(3, 8, 0), 2, 3
    index = torch.tensor([5, 0, 2**30 + 7, 5], dtype=torch.int32)

    def fraction(k, t):
        return (draws.mix((k + (t + 1) * draws.GAMMA) & draws.MASK) >> (64 - bits)) / 2**bits

    trials = [[[(i * B + b) * w + k for k in range(w)] for b in range(B)] for i in index.tolist()]
    expected = [[[fraction(key, t) for t in row] for row in item] for item in trials]
    assert draws.fractions_at(key, index, B, w, dtype, "cpu", kernel=kernel).tolist() == expected
    assert draws.fractions(key, torch.tensor(trials), dtype).tolist() == expected
    normal = [
        [
            [np.sqrt(-2 * np.log1p(-fraction(key, t))) * np.cos(2 * np.pi * fraction(angle, t)) for t in row]
            for row in item
        ]
        for item in trials
    ]
    tolerance = 1e-6 if bits == 24 else 1e-14  # float32's cos near a zero: absolute
    normals = draws.normals_at(key, angle, index, B, w, dtype, "cpu").numpy()
    np.testing.assert_allclose(normals, normal, rtol=tolerance, atol=tolerance)


def test_fractions_are_uniform_below_one_and_normals_standard():
    index = torch.arange(2**14)
    u = draws.fractions_at(draws.stream_key(1, 5, 3), index, 2, 2, torch.float32, "cpu")
    assert u.dtype == torch.float32 and 0 <= u.min() and u.max() < 1
    assert kstest(u.flatten().numpy(), "uniform").pvalue > 1e-4
    z = draws.normals_at(draws.stream_key(1, 7, 0), draws.stream_key(1, 8, 0), index, 2, 2, torch.float64, "cpu")
    assert kstest(z.flatten().numpy(), "norm").pvalue > 1e-4


def test_the_kernel_is_the_path_taken_on_the_cpu():
    needs_extra("numba")  # without it the torch expression serves the CPU (tested above)
    assert draws.below(draws.stream_key(1, 2, 3), 10, 7, "cpu").dtype == torch.bool
    assert draws.numba_kernels().below_one.signatures  # compiled by the call above


def test_bounds_are_exact_probabilities_at_the_ends():
    assert draws.bound(0.0) == 0 and draws.bound(1.0) == 2**32 and draws.bound(0.5) == 2**31
    key = draws.stream_key(3, 0, 0)
    assert not draws.below(key, 10**5, draws.bound(0.0), "cpu").any()
    assert draws.below(key, 10**5, draws.bound(1.0), "cpu").all()


def test_draws_are_uniform_and_streams_and_iterations_differ():
    """Chi-square tests of the top and bottom bytes of 2^17 draws, and of their pairs one iteration apart."""
    count = 2**17
    key, later = draws.stream_key(5, 2, 40), draws.stream_key(5, 2, 41)
    t = torch.arange(count)
    u, v = (draws._uniform_tensor(k, t).numpy() for k in (key, later))
    for byte in (u >> 24, u & 255, v >> 24):
        assert chisquare(np.bincount(byte, minlength=256)).pvalue > 1e-4
    pairs = (u >> 28) * 16 + (v >> 28)  # the top 4 bits of a trial in iterations 40 and 41
    assert chisquare(np.bincount(pairs, minlength=256)).pvalue > 1e-4
    keys = {draws.stream_key(seed, stream, k) for seed in range(3) for stream in range(5) for k in range(50)}
    assert len(keys) == 3 * 5 * 50


def test_index_is_uniform_over_n():
    key, n, count = draws.stream_key(9, 4, 0), 7, 70000
    counts = np.bincount([draws.index(key, t, n) for t in range(count)], minlength=n)
    assert len(counts) == n and chisquare(counts).pvalue > 1e-4
    assert binomtest(int(counts[0]), count, 1 / n).pvalue > 1e-4


@pytest.mark.parametrize("batch, dim", [(3, 2), (1, 1)])  # (1, 1): the events drawn inside the exchange
@pytest.mark.parametrize("method", ["pdmm", "admm"])
def test_a_run_is_the_same_on_both_paths_bit_for_bit(monkeypatch, method, batch, dim):
    """A solve over a network with every drawn effect, on the numba kernels (draws and pdmm.masked) and on
    the torch expressions."""
    problem = pdmm.averaging(
        pdmm.topology("random_geometric", n=25, seed=3), np.random.default_rng(0).normal(size=(batch, 25, dim))
    )
    network = Network(drop=0.2, wake=0.8, edge_up=0.9, burst=(0.1, 0.4), seed=4)
    runs = []
    for path in ("kernel", "torch"):
        if path == "torch":
            monkeypatch.setattr(draws, "NUMBA", False)
        runs.append(pdmm.solve(problem, method=method, max_iter=60, tol=0, network=network))
    assert np.array_equal(runs[0].x, runs[1].x)
    for name in ("messages", "bits", "residual"):
        assert np.array_equal(runs[0].history[name], runs[1].history[name]), name
    assert not np.array_equal(runs[0].x, pdmm.solve(problem, method=method, max_iter=60, tol=0).x)


def test_numba_loads_at_the_first_kernel_and_without_it_a_run_gives_the_same_bits(tmp_path):
    """`import pdmm` imports no numba; a CPU network run imports it where it is installed; where it cannot be
    imported, pdmm.draws.numba_kernels() is None and the same run gives the same x from the torch expressions."""
    x, printed = {}, {}
    for numba in ("present", "absent"):
        done = subprocess.run(
            [sys.executable, "-c", LOSSY_RUN, numba, tmp_path / f"{numba}.npy"], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        printed[numba], x[numba] = done.stdout.split(), np.load(tmp_path / f"{numba}.npy")
    installed = draws.numba_kernels() is not None
    assert printed == {"present": ["False", str(installed)], "absent": ["False", "False"]}
    assert np.array_equal(x["present"], x["absent"])
