#!/usr/bin/env bash
# Record the CUDA rows of BENCHMARKS.md on one GPU, then regenerate the page (benchmarks/report.py).
#
#     bash benchmarks/gpu.sh [--device cuda] [--quick] [--results-dir DIR] [--shared NOTE]
#
# Steps, each under `timeout` (seconds; the caps, and 2 s for each to stop, add up to
# 474 s, within 8 minutes on one H200; a --quick run's steps get 120 s each, for a busy CPU):
#   bench_pdmm             10^7 directed edges at d = 1 and 16, 10^8 at d = 1 (one command each; building
#                          and renumbering 10^8 edges on the host takes most of its time): solve's node form
#                          against the copy bound
#   bench_decentralised    every method's iteration at 10^7 directed edges, d = 1 and 16
#   bench_attention        a GPT-sized layer: d_model 4096, 32 heads, 2048 tokens, batch 4
#   bench_seeds            1, 8 and 32 seeds of the char GPT as one vmapped model against one after another
#   bench_train            the Shakespeare char run's training throughput
#   bench_first_iteration  edge arrays to the first iteration at 10^7 directed edges
# A step that fails or runs out of time is named and the others still run; the page is regenerated from
# the rows written and the script exits 1. DEVICE (default cuda) or --device chooses the device;
# --quick runs every script's smoke size (`bash benchmarks/gpu.sh --device cpu --quick` on any machine).
# --results-dir DIR writes the CSVs, the page (DIR/BENCHMARKS.md) and its figures under DIR instead of
# benchmarks/results/, BENCHMARKS.md and docs/figures/benchmarks/. The scripts run from the repository root
# on this checkout's code (PYTHONPATH), so their rows record `python benchmarks/SCRIPT ...` as every run does.
set -euo pipefail

DEVICE=${DEVICE:-cuda}
QUICK=()
WHERE=()
PAGE=()
usage() {  # usage MESSAGE: a wrong command line, named in one line (exit status 2)
    echo "gpu.sh: $1 (takes --device DEVICE, --quick, --results-dir DIR, --shared NOTE)" >&2
    exit 2
}

while (($#)); do
    case $1 in
        --device | --results-dir | --shared) (($# >= 2)) || usage "$1 needs a value" ;;&
        --device) DEVICE=$2; shift 2 ;;
        --quick) QUICK=(--quick); shift ;;
        --results-dir)
            results=$(realpath -m -- "$2")
            WHERE+=(--results-dir "$results")
            PAGE=(--results-dir "$results" --out "$results/BENCHMARKS.md" --figures "$results/figures")
            shift 2 ;;
        --shared) WHERE+=(--shared "$2"); shift 2 ;;
        *) usage "unknown option $1" ;;
    esac
done

cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
FAILED=()

step() {  # step SECONDS SCRIPT ARGS...: one benchmark under timeout; a failure is named, not fatal
    local seconds=$1 script=$2
    shift 2
    echo "== $script $* (at most ${seconds} s)"
    if ! timeout --signal=INT --kill-after=2 "$seconds" python "benchmarks/$script" --device "$DEVICE" "$@" \
        ${QUICK[@]+"${QUICK[@]}"} ${WHERE[@]+"${WHERE[@]}"}; then
        FAILED+=("$script $*")
    fi
}

if ((${#QUICK[@]})); then  # the smoke sizes: each script's --quick, the GPU sizes left out
    step 120 bench_pdmm.py --dims 1 --graphs random_regular
    step 120 bench_decentralised.py
    step 120 bench_attention.py
    step 120 bench_seeds.py --models char_gpt
    step 120 bench_train.py
    step 120 bench_first_iteration.py
else
    step 60 bench_pdmm.py --sizes 10000000 --dims 1 16 --graphs random_regular --repeats 3
    step 130 bench_pdmm.py --sizes 100000000 --dims 1 --graphs random_regular --repeats 3
    step 75 bench_decentralised.py --edges 10000000 --dims 1 16
    step 55 bench_attention.py --d-model 4096 --heads 32 --tokens 2048 --batch 4 --repeats 10
    step 40 bench_seeds.py --seeds 1,8,32 --models char_gpt
    step 60 bench_train.py
    step 25 bench_first_iteration.py --repeats 2
fi
timeout 15 python benchmarks/report.py ${PAGE[@]+"${PAGE[@]}"}

if ((${#FAILED[@]})); then
    printf 'gpu.sh: failed or out of time: %s\n' "${FAILED[@]}" >&2
    exit 1
fi
