#!/usr/bin/env bash
# On the GPU machine: what each numerics lever gives J runs sharing the GPU (BENCHMARKS.md, "Table 2
# on one H100"): the runs-per-hour benchmark of FedAvg (FEDGMH_BENCH_ALGORITHMS for others), both shapes, as `fedgmh train`
# runs them (fp32, deterministic cuDNN), then with TF32, with cuDNN's benchmark mode, with
# channels_last, and with all three. Every measurement is appended to $OUT/levers_<setting>.jsonl as
# it is taken (FEDGMH_BENCH_PARTIAL), so a call cut off at its limit keeps what it measured (5 files
# and one log: the device tool brings back 8). Read each with `python tests/benchmarks/summarise.py FILE`.
#
#   bash tools/lease/levers.sh [J] [ROUNDS]      (default 12 runs at once, 5 timed rounds each; ~5 min on an H100)
set -uo pipefail
jobs=${1:-12}
rounds=${2:-5}
out=${OUT:-results/lease/out}
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} FEDGMH_BENCH_ALGORITHMS=${FEDGMH_BENCH_ALGORITHMS:-fedavg}
for setting in "fp32" "tf32 FEDGMH_BENCH_TF32=1" "cudnn-benchmark FEDGMH_BENCH_DETERMINISTIC=0" \
               "channels-last FEDGMH_BENCH_MEMORY_FORMAT=channels_last" \
               "all-three FEDGMH_BENCH_TF32=1 FEDGMH_BENCH_DETERMINISTIC=0 FEDGMH_BENCH_MEMORY_FORMAT=channels_last"; do
    read -r name levers <<< "$setting"
    echo "== $name ($SECONDS s)" >> "$out/levers.log"
    env $levers FEDGMH_BENCH_PARTIAL="$out/levers_$name.jsonl" FEDGMH_BENCH_DEVICE=${FEDGMH_BENCH_DEVICE:-cuda} FEDGMH_BENCH_JOBS="$jobs" \
        FEDGMH_BENCH_ROUNDS="$rounds" python3 -m pytest -q -p no:cacheprovider tests/benchmarks/test_throughput.py \
        -o addopts="" -m benchmark >> "$out/levers.log" 2>&1
    echo "$name: $(wc -l < "$out/levers_$name.jsonl" 2>/dev/null || echo 0) measurements"
done
