"""Forward + backward cost of each residual signal and kernel, relative to standard softmax attention.

One attention.MultiHeadAttention layer (layer_index=1, dropout 0, float32) on a fixed input
x of shape (batch, tokens, d_model) with requires_grad, on the causal token graph (the LM's) or
the full one (--graph full). One sample is y = layer(x, graph); y.backward(g) with a fixed g,
parameter and input gradients set to None before each call. Rows: every residual with the
softmax kernel, the diff and linear kernels with the standard residual, symmetric softmax.

    ms      median over --repeats of one forward + backward
    ratio   median over repeats of (this row's time / standard softmax's time in the same repeat)
    peak    the most memory held at once during one forward + backward beyond what was live
            before it (weights, x, g): activations saved for backward, temporaries, gradients.
            CUDA: torch.cuda.max_memory_allocated. CPU: the running sum of the sizes of the CPU
            allocator's allocations and frees that torch.profiler(profile_memory=True) records
            during one call (tensor bytes requested, not the process's resident memory).

Each repeat runs every row once, in an order rotated by one row per repeat, so drift and cache
effects touch every row alike; --warmup untimed repeats come first. Targets (issue): attentionx
<= 1.05x, belief <= 1.08x, belief_star <= 1.15x of standard (the source papers report 1-4 % and
4-10 % on GPU).

A second table runs standard softmax attention on a sparse token graph (a random 8-regular graph
with self loops over --sparse-tokens tokens, batch 1) in both layouts: the dense (T, T) mask
through scaled_dot_product_attention and the edge list through gather / aggregate.

    python benchmarks/bench_attention.py [--device cpu] [--graph causal] [--batch 8] [--tokens 256]
        [--d-model 256] [--heads 8] [--repeats 30] [--warmup 3] [--sparse-tokens 1024,4096]
"""
import argparse
import itertools
import os
import statistics
import time

import networkx as nx
import torch
from torch.profiler import ProfilerActivity, profile, record_function

import attention
from experiments.common import tune_allocator
from machine import cpu_model

# (residual, kernel, symmetric, target ratio or None)
ROWS = [("standard", "softmax", False, None), ("attentionx", "softmax", False, 1.05),
        ("belief", "softmax", False, 1.08), ("belief_star", "softmax", False, 1.15),
        ("concat", "softmax", False, None), ("standard", "diff", False, None),
        ("standard", "linear", False, None), ("standard", "softmax", True, None)]


def timed(fn, device):
    """Seconds for one call of fn, with the device synchronised before both clock reads."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
    start = time.perf_counter()
    fn()
    if device.type != "cpu":
        torch.accelerator.synchronize(device)
    return time.perf_counter() - start


def peak_bytes(fns, device):
    """For each fn, the most bytes allocated at once during its call beyond those live before it."""
    if device.type == "cuda":
        peaks = []
        for fn in fns:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
            fn()
            torch.cuda.synchronize(device)
            peaks.append(torch.cuda.max_memory_allocated(device) - before)
        return peaks
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:  # one session, one window per fn
        for i, fn in enumerate(fns):
            with record_function(f"fn {i}"):
                fn()
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
    windows = {e.name(): (e.start_ns(), e.end_ns()) for e in events if e.name().startswith("fn ")}
    peaks = []
    for i in range(len(fns)):
        start, end = windows[f"fn {i}"]
        sizes = (e.nbytes() for e in events if e.name() == "[memory]" and start <= e.start_ns() <= end)
        peaks.append(max(itertools.accumulate(sizes, initial=0)))  # allocations > 0, frees < 0
    return peaks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--graph", choices=("causal", "full"), default="causal")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--allocator", choices=("tuned", "default"), default="tuned",
                        help="tuned: glibc keeps freed memory, as `pdmm-bridge` commands run (BENCHMARKS.md)")
    parser.add_argument("--sparse-tokens", default="1024,4096", help="token counts of the sparse-graph table")
    args = parser.parse_args()
    tuned = args.allocator == "tuned" and tune_allocator()
    device = torch.device(args.device)
    load = os.getloadavg()[0]

    B, T, C = args.batch, args.tokens, args.d_model
    graph = attention.TokenGraph.causal(T) if args.graph == "causal" else attention.TokenGraph.full(T)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, C, generator=generator).to(device).requires_grad_()
    g = torch.randn(B, T, C, generator=generator).to(device)
    layers = []
    for residual, kernel, symmetric, _ in ROWS:
        torch.manual_seed(0)  # the same W^Q, W^K, W^V, W^o wherever the shapes agree
        config = attention.AttentionConfig(d_model=C, n_head=args.heads, residual=residual, kernel=kernel,
                                           symmetric=symmetric)
        layers.append(attention.MultiHeadAttention(config, layer_index=1).to(device, torch.float32))

    def clear(layer):
        layer.zero_grad(set_to_none=True)
        x.grad = None

    def step(layer):
        clear(layer)
        layer(x, graph).backward(g)

    times = [[] for _ in ROWS]
    for r in range(args.warmup + args.repeats):
        for i in [(r + j) % len(ROWS) for j in range(len(ROWS))]:
            seconds = timed(lambda: step(layers[i]), device)
            if r >= args.warmup:
                times[i].append(seconds)
    for layer in layers:
        clear(layer)  # so that no call frees gradients left by an earlier one
    peaks = peak_bytes([lambda layer=layer: step(layer) for layer in layers], device)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()}"
          + (f", GPU: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""))
    print(f"device {device}, float32, {args.graph} graph, B = {B}, T = {T}, d_model = {C}, {args.heads} heads, "
          f"median of {args.repeats} repeats after {args.warmup} warm-up, {'tuned' if tuned else 'default'} allocator, "
          f"load average {load:.2f} at start\n")
    print("| residual | kernel | symmetric | ms (forward + backward) | ratio to standard softmax | peak MB "
          "| target | met |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for (residual, kernel, symmetric, target), samples, peak in zip(ROWS, times, peaks):
        ratio = statistics.median(t / t0 for t, t0 in zip(samples, times[0]))
        met = "—" if target is None else ("yes" if ratio <= target else "no")
        print(f"| {residual} | {kernel} | {'yes' if symmetric else 'no'} | {1e3 * statistics.median(samples):.2f} "
              f"| {ratio:.3f} | {peak / 2**20:.1f} | {'—' if target is None else f'{target:.2f}'} | {met} |")
    sparse_table(args, device)


def sparse_table(args, device):
    """Dense-mask vs edge-list layout of one sparse token graph, same layer and input."""
    print("\n| tokens | edges | layout | ms (forward + backward) | peak MB |")
    print("|---:|---:|---|---:|---:|")
    for T in (int(t) for t in args.sparse_tokens.split(",") if t):
        graph = attention.TokenGraph.from_networkx(nx.random_regular_graph(8, T, seed=0), layout="sparse")
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(1, T, args.d_model, generator=generator).to(device).requires_grad_()
        g = torch.randn(1, T, args.d_model, generator=generator).to(device)
        torch.manual_seed(0)
        layer = attention.MultiHeadAttention(attention.AttentionConfig(args.d_model, args.heads)).to(device)

        def step(graph=graph):
            layer.zero_grad(set_to_none=True)
            x.grad = None
            layer(x, graph).backward(g)

        for layout_graph in (graph.dense(), graph):
            run = lambda: step(layout_graph)
            for _ in range(args.warmup):
                run()
            ms = 1e3 * statistics.median(timed(run, device) for _ in range(max(3, args.repeats // 3)))
            peak = peak_bytes([run], device)[0]
            print(f"| {T} | {graph.num_edges:,} | {layout_graph.layout} | {ms:.2f} | {peak / 2**20:.1f} |")


if __name__ == "__main__":
    main()
