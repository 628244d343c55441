#!/usr/bin/env bash
# On the GPU machine, before chunk.sh: does NVIDIA's CUDA MPS daemon help J runs that share the GPU?
# Measures the runs-per-hour benchmark (test_table2_runs_per_hour: J FedAvg runs, MNIST-shaped, each
# its own process) without the daemon, then with it, and leaves the daemon running only when it gave
# more rounds per second. Results: $OUT/bench_mps_off.json and $OUT/bench_mps_on.json (pytest-benchmark
# JSON; summarise.py reads them). Where MPS cannot be started, or CUDA does not work under it, the
# daemon is stopped again and the runs share the GPU by time-slicing, as they would anyway. The
# benchmarks' output goes to $OUT/mps.log (three files in all: the device tool brings back eight).
#
#   bash tools/lease/mps.sh [J]        (default 12; env: OUT, the device tool sets it)
set -uo pipefail
jobs=${1:-12}
out=${OUT:-results/lease/out}
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}

bench() {  # $1: the JSON to write
    FEDGMH_BENCH_DEVICE=cuda FEDGMH_BENCH_JOBS=$jobs FEDGMH_BENCH_ALGORITHMS=fedavg timeout 240 \
        python3 -m pytest -q -p no:cacheprovider tests/benchmarks/test_throughput.py -o addopts="" -m benchmark \
        -k mnist --benchmark-json "$1" >> "$out/mps.log" 2>&1
}
rate() {  # rounds per second of all J runs together, 0 when the benchmark did not finish
    python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['benchmarks'][0]['extra_info']['rounds_per_s'])" "$1" 2>/dev/null || echo 0
}
stop_mps() { echo quit | nvidia-cuda-mps-control >/dev/null 2>&1; sleep 2; }

stop_mps  # a daemon left running by an earlier call would make the "off" measurement one with MPS
bench "$out/bench_mps_off.json"
off=$(rate "$out/bench_mps_off.json")
echo "MPS off: $off rounds/s ($jobs FedAvg runs, MNIST-shaped)"
if ! command -v nvidia-cuda-mps-control >/dev/null; then
    echo "MPS: nvidia-cuda-mps-control not found; the runs share the GPU by time-slicing"; exit 0
fi
nvidia-cuda-mps-control -d || { echo "MPS: the daemon did not start"; exit 0; }
if ! timeout 60 python3 -c "import torch; assert torch.ones(2, device='cuda').sum().item() == 2" >/dev/null 2>&1; then
    stop_mps; echo "MPS: CUDA does not work under the daemon; stopped it"; exit 0
fi
bench "$out/bench_mps_on.json"
on=$(rate "$out/bench_mps_on.json")
echo "MPS on: $on rounds/s"
if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)" "$on" "$off"; then
    echo "MPS: left running (faster)"
else
    stop_mps; echo "MPS: stopped (not faster)"
fi
