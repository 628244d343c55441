#!/usr/bin/env bash
# On the GPU machine: what each numerics lever gives J runs sharing the GPU (BENCHMARKS.md, "What
# remains to measure on a GPU"): the runs-per-hour benchmark of FedAvg (FEDGMH_BENCH_ALGORITHMS for
# others), both shapes, as `fedgmh train` runs them (fp32, deterministic cuDNN), then with the
# convolutions unfolded into batched GEMMs (engine option conv=unfold: cuBLAS GEMMs and im2col, no
# cuDNN convolution, so a candidate for a deterministic GPU default if it pays and repeats bit for bit), that with TF32, TF32 alone,
# the evaluation in vmap passes (eval_batched), cuDNN's benchmark mode, channels_last, and TF32 + benchmark mode +
# channels_last together; the most likely winners first, as a call may be cut. Every measurement is appended to
# $OUT/levers.jsonl as it is taken (FEDGMH_BENCH_PARTIAL), labelled with its setting
# (FEDGMH_BENCH_LABEL), so a call cut off at its limit keeps what it measured; the output is two files
# (levers.jsonl, levers.log). Read it with `python tests/benchmarks/summarise.py levers.jsonl`
# (one table per setting).
#
#   bash tools/lease/levers.sh [J] [ROUNDS]      (default 12 runs at once, 5 timed rounds each)
#   env: LEVERS, the settings to measure (default all, in the order below), e.g. LEVERS="tf32 all-three"
#        in a second call for what a first call cut off did not reach
# About 10 minutes on an H100 at J = 12 (estimated from the lease of 2026-11-24: ~22 s to start 12
# runs, then a warm-up and a timed call per shape and setting; 8 settings), so it may need two calls.
set -uo pipefail
jobs=${1:-12}
rounds=${2:-5}
out=${OUT:-results/lease/out}
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} FEDGMH_BENCH_ALGORITHMS=${FEDGMH_BENCH_ALGORITHMS:-fedavg}
export FEDGMH_BENCH_PARTIAL=$out/levers.jsonl FEDGMH_BENCH_DEVICE=${FEDGMH_BENCH_DEVICE:-cuda} FEDGMH_BENCH_JOBS=$jobs FEDGMH_BENCH_ROUNDS=$rounds
for setting in "fp32" "unfold FEDGMH_BENCH_CONV=unfold" "unfold-tf32 FEDGMH_BENCH_CONV=unfold FEDGMH_BENCH_TF32=1" \
               "tf32 FEDGMH_BENCH_TF32=1" "eval-batched FEDGMH_BENCH_EVAL_BATCHED=1" "cudnn-benchmark FEDGMH_BENCH_DETERMINISTIC=0" \
               "channels-last FEDGMH_BENCH_MEMORY_FORMAT=channels_last" \
               "all-three FEDGMH_BENCH_TF32=1 FEDGMH_BENCH_DETERMINISTIC=0 FEDGMH_BENCH_MEMORY_FORMAT=channels_last"; do
    read -r name levers <<< "$setting"
    [ -n "${LEVERS:-}" ] && [[ " $LEVERS " != *" $name "* ]] && continue
    echo "== $name ($SECONDS s)" >> "$out/levers.log"
    env $levers FEDGMH_BENCH_LABEL="$name" python3 -m pytest -q -p no:cacheprovider tests/benchmarks/test_throughput.py \
        -o addopts="" -m benchmark >> "$out/levers.log" 2>&1
    echo "$name: $(cat "$out/levers.jsonl" 2>/dev/null | grep -c "\"label\": \"$name\"") measurements"
done
