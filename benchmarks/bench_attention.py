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
effects touch every row alike; --warmup untimed repeats come first. Targets: attentionx <= 1.05x,
belief <= 1.08x (the source papers report 1-4 % on GPU), belief_star <= 1.10x, differential
<= 1.35x of standard (issue 32; belief*'s paper reports 4-10 % on GPU).

A second table runs standard softmax attention on a sparse token graph (a random regular graph of
degree --sparse-degree, 8 by default, with self loops over --sparse-tokens tokens, batch 1) along
--sparse-paths: "dense", the (T, T) mask through scaled_dot_product_attention; "unblocked", the
edge list with plain autograd (graph.sparse(block=0), which keeps (E, B, nh, hs) tensors for
backward); "blocked", the edge list in blocks of edges (graph.sparse(), automatic block size;
attention.sparse). Each repeat runs every path twice in a row, paths in a rotated order, and times
the second call, as a training loop repeats one path (in one kernel-only run the blocked path took
1.12x the unblocked one's time when run right after it, 0.98x when run after itself).

    ms         median of one layer forward + backward (as above)
    ratio      median over repeats of (this path's time / the unblocked path's in the same repeat)
    layer      peak of the layer's forward + backward (as above), MB and per edge
    kernel     peak of attention.kernels.softmax_attention alone, forward + backward, on q, k, v
               leaves laid out as the layer's heads, per edge; "beyond" subtracts what any path must
               hold, its output and the gradients of q, k and v (4 T d_model numbers)
    saved      bytes of the distinct storages autograd keeps for backward during the kernel's forward
               (torch.autograd.graph.saved_tensors_hooks), less q, k, v and the graph's index
               tensors, per edge: deterministic, unlike the peaks

    python benchmarks/bench_attention.py [--device cpu] [--graph causal] [--batch 8] [--tokens 256]
        [--d-model 256] [--heads 8] [--repeats 30] [--warmup 3] [--sparse-tokens 1024,4096]
        [--sparse-paths dense,unblocked,blocked] [--sparse-degree 8] [--no-variants] [--quick]
        [--results-dir benchmarks/results] [--shared no]

--quick is a smoke run: batch 2, 32 tokens, d_model 32, 4 heads, 3 repeats, no warm-up, sparse graphs of 64 tokens.

Rows go to benchmarks/results/bench_attention.csv (tables "variants" and "sparse"; benchmarks/results.py).
"""

import argparse
import itertools
import os
import statistics
import time

import networkx as nx
import torch
from machine import cpu_model
from results import Recorder, add_arguments
from torch.profiler import ProfilerActivity, profile, record_function

import attention
from attention.kernels import softmax_attention
from attention.sparse import block_size
from pdmm import keep_freed_memory

# (residual, kernel, symmetric, target ratio or None)
ROWS = [
    ("standard", "softmax", False, None),
    ("attentionx", "softmax", False, 1.05),
    ("belief", "softmax", False, 1.08),
    ("belief_star", "softmax", False, 1.10),
    ("concat", "softmax", False, None),
    ("standard", "diff", False, 1.35),
    ("standard", "linear", False, None),
    ("standard", "softmax", True, None),
]


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
    parser.add_argument(
        "--allocator",
        choices=("tuned", "default"),
        default="tuned",
        help="tuned: glibc keeps freed memory, as `pdmm-bridge` commands run (BENCHMARKS.md)",
    )
    parser.add_argument("--sparse-tokens", default="1024,4096", help="token counts of the sparse-graph table")
    parser.add_argument(
        "--sparse-paths",
        default="dense,unblocked,blocked",
        help="rows of the sparse-graph table: any of dense, unblocked, blocked",
    )
    parser.add_argument(
        "--sparse-degree", type=int, default=8, help="neighbours per token in the sparse-graph table, besides itself"
    )
    parser.add_argument("--no-variants", action="store_true", help="skip the residual / kernel table")
    parser.add_argument("--quick", action="store_true", help="a smoke run at tiny sizes (see the docstring)")
    add_arguments(parser)
    args = parser.parse_args()
    if args.quick:
        args.batch, args.tokens, args.d_model, args.heads, args.repeats, args.warmup = 2, 32, 32, 4, 3, 0
        args.sparse_tokens = "64"
    recorder = Recorder("bench_attention", args.results_dir, args.shared)  # before any work: load at start
    tuned = args.allocator == "tuned" and keep_freed_memory()
    device = torch.device(args.device)
    load = float(recorder.provenance["load_at_start"])
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()}"
        + (f", GPU: {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "")
    )
    if not args.no_variants:
        variants_table(args, device, tuned, load, recorder)
    sparse_table(args, device, tuned, recorder)


def variants_table(args, device, tuned, load, recorder):
    """Every residual and kernel on the causal or full token graph, against standard softmax."""
    B, T, C = args.batch, args.tokens, args.d_model
    graph = attention.TokenGraph.causal(T) if args.graph == "causal" else attention.TokenGraph.full(T)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, C, generator=generator).to(device).requires_grad_()
    g = torch.randn(B, T, C, generator=generator).to(device)
    layers = []
    for residual, kernel, symmetric, _ in ROWS:
        torch.manual_seed(0)  # the same W^Q, W^K, W^V, W^o wherever the shapes agree
        config = attention.AttentionConfig(
            d_model=C, n_head=args.heads, residual=residual, kernel=kernel, symmetric=symmetric
        )
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
            seconds = timed(lambda i=i: step(layers[i]), device)
            if r >= args.warmup:
                times[i].append(seconds)
    for layer in layers:
        clear(layer)  # so that no call frees gradients left by an earlier one
    peaks = peak_bytes([lambda layer=layer: step(layer) for layer in layers], device)

    print(
        f"device {device}, float32, {args.graph} graph, B = {B}, T = {T}, d_model = {C}, {args.heads} heads, "
        f"median of {args.repeats} repeats after {args.warmup} warm-up, {'tuned' if tuned else 'default'} allocator, "
        f"load average {load:.2f} at start\n"
    )
    print(
        "| residual | kernel | symmetric | ms (forward + backward) | ratio to standard softmax | peak MB "
        "| target | met |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|")
    for (residual, kernel, symmetric, target), samples, peak in zip(ROWS, times, peaks, strict=False):
        ratio = statistics.median(t / t0 for t, t0 in zip(samples, times[0], strict=False))
        met = "—" if target is None else ("yes" if ratio <= target else "no")
        print(
            f"| {residual} | {kernel} | {'yes' if symmetric else 'no'} | {1e3 * statistics.median(samples):.2f} "
            f"| {ratio:.3f} | {peak / 2**20:.1f} | {'—' if target is None else f'{target:.2f}'} | {met} |"
        )
        recorder.add(
            "variants",
            device=str(device),
            token_graph=args.graph,
            batch=B,
            tokens=T,
            d_model=C,
            heads=args.heads,
            allocator="tuned" if tuned else "default",
            residual=residual,
            kernel=kernel,
            symmetric="yes" if symmetric else "no",
            ms=1e3 * statistics.median(samples),
            ratio_to_standard=ratio,
            peak_mb=peak / 2**20,
            target=target,
            met=None if target is None else met,
        )


def sparse_table(args, device, tuned, recorder):
    """Dense mask, unblocked and blocked edge list on one sparse token graph, same layer and input."""
    paths = [p for p in args.sparse_paths.split(",") if p]
    if not paths or set(paths) - {"dense", "unblocked", "blocked"}:
        raise SystemExit(f"--sparse-paths takes dense, unblocked, blocked; got {args.sparse_paths!r}")
    print(
        f"\nsparse graphs: random {args.sparse_degree}-regular with self loops, device {device}, float32, B = 1, "
        f"d_model = {args.d_model}, {args.heads} heads, "
        f"median of {max(3, args.repeats // 3)} repeats after {args.warmup} warm-up, "
        f"{'tuned' if tuned else 'default'} allocator, load average {os.getloadavg()[0]:.2f} at this table's start\n"
    )
    print(
        "| tokens | edges | path | block | ms (forward + backward) | ratio to unblocked | layer peak MB "
        "| layer kB/edge | kernel kB/edge | kernel kB/edge beyond output and input grads | saved kB/edge |"
    )
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for T in (int(t) for t in args.sparse_tokens.split(",") if t):
        sparse_rows(args, device, tuned, recorder, paths, T)


def sparse_rows(args, device, tuned, recorder, paths, T):
    """The sparse-graph table's rows for T tokens: each path timed, its peaks and saved bytes measured."""
    C, nh = args.d_model, args.heads
    regular = attention.TokenGraph.from_networkx(
        nx.random_regular_graph(args.sparse_degree, T, seed=0), layout="sparse"
    )
    graphs = {"dense": regular.dense(), "unblocked": regular.sparse(block=0), "blocked": regular.sparse()}
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, T, C, generator=generator).to(device).requires_grad_()
    g = torch.randn(1, T, C, generator=generator).to(device)
    q, k, v = (
        torch.randn(1, T, nh, C // nh, generator=generator).to(device).transpose(1, 2).requires_grad_()
        for _ in range(3)
    )  # leaves laid out as the layer's heads
    g_heads = torch.randn(1, T, nh, C // nh, generator=generator).to(device).transpose(1, 2)
    torch.manual_seed(0)
    layer = attention.MultiHeadAttention(attention.AttentionConfig(C, nh)).to(device)

    def clear():
        layer.zero_grad(set_to_none=True)
        x.grad = q.grad = k.grad = v.grad = None

    def step(graph):
        clear()
        layer(x, graph).backward(g)

    def kernel(graph):
        softmax_attention(q, k, v, graph).backward(g_heads)

    times = {p: [] for p in paths}
    for r in range(args.warmup + max(3, args.repeats // 3)):
        for p in paths[r % len(paths) :] + paths[: r % len(paths)]:
            step(graphs[p])  # time the second of two calls: not right after another path's memory traffic
            seconds = timed(lambda p=p: step(graphs[p]), device)
            if r >= args.warmup:
                times[p].append(seconds)
    for p in paths:
        graph = graphs[p]
        clear()  # so that no measured call frees gradients left by an earlier one
        layer_peak, kernel_peak = peak_bytes(
            [lambda graph=graph: layer(x, graph).backward(g), lambda graph=graph: kernel(graph)], device
        )
        kernel_saved = saved_bytes(lambda graph=graph: softmax_attention(q, k, v, graph), [q, k, v], graph, device)
        E, node = graph.num_edges, 4 * T * C * q.element_size()
        ratio = (
            statistics.median(t / t0 for t, t0 in zip(times[p], times["unblocked"], strict=False))
            if "unblocked" in times
            else float("nan")
        )
        block = "—" if p == "dense" else block_size(graph.block, graph.edge_list(device), (1, nh, C // nh))
        print(
            f"| {T} | {E:,} | {p} | {block} | {1e3 * statistics.median(times[p]):.2f} | {ratio:.3f} "
            f"| {layer_peak / 2**20:.1f} | {layer_peak / E / 1e3:.2f} | {kernel_peak / E / 1e3:.2f} "
            f"| {(kernel_peak - node) / E / 1e3:.2f} | {kernel_saved / E / 1e3:.3f} |"
        )
        recorder.add(
            "sparse",
            device=str(device),
            degree=args.sparse_degree,
            d_model=C,
            heads=nh,
            allocator="tuned" if tuned else "default",
            tokens=T,
            edges=E,
            path=p,
            block=None if p == "dense" else block,
            ms=1e3 * statistics.median(times[p]),
            ratio_to_unblocked=ratio,
            layer_peak_mb=layer_peak / 2**20,
            layer_kb_per_edge=layer_peak / E / 1e3,
            kernel_kb_per_edge=kernel_peak / E / 1e3,
            kernel_beyond_kb_per_edge=(kernel_peak - node) / E / 1e3,
            saved_kb_per_edge=kernel_saved / E / 1e3,
        )


def saved_bytes(fn, inputs, graph, device):
    """Bytes of the distinct storages autograd saves for backward during fn(), less the inputs' and
    the graph's index tensors' storages."""
    storages = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    owned = {t.untyped_storage().data_ptr() for t in inputs}
    if graph.layout == "sparse":
        edges = graph.edge_list(device)
        owned |= {t.untyped_storage().data_ptr() for t in (edges.src, edges.dst)}
    return sum(size for ptr, size in storages.items() if ptr not in owned)


if __name__ == "__main__":
    main()
