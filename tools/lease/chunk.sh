#!/usr/bin/env bash
# On the GPU machine, in the repository root: one chunk of at most BUDGET seconds of the README's
# "Table 2 at full scale" run, then every finished record packed into $OUT for the way back.
# Call it again (within the machine's idle time) to go on: finished runs are not trained again and
# a run cut off resumes from its checkpoint (tools/lease/README.md).
#
#   bash tools/lease/chunk.sh [BUDGET_S]          (default 540: a device call may last 600 s)
#   env: LEASE_CONFIG (default config/table2_full.yaml), LEASE_JOBS (training jobs sharing the GPU, default 8),
#        LEASE_RUNS_PER_JOB (runs per job in one batched step, config runs_per_job; default 1, decide.py says),
#        OUT (where the records go; the device tool sets it)
set -uo pipefail
budget=${1:-540}
config=${LEASE_CONFIG:-config/table2_full.yaml}
jobs=${LEASE_JOBS:-8}
runs_per_job=${LEASE_RUNS_PER_JOB:-1}
keep=results/lease                 # ignored by git, so it stays on the machine between calls
out=${OUT:-$keep/out}
start=$SECONDS
mkdir -p "$keep/mirror" "$keep/parts" "$out"

# 1. snakemake and the project from the carried wheels, once per machine; the code is the working tree's
if ! command -v snakemake >/dev/null; then
    if [ ! -x /tmp/site/bin/snakemake ]; then
        [ -d .lease/wheels ] || { echo "no snakemake here: carry .lease/wheels (bash tools/lease/prepare.sh)" >&2; exit 1; }
        python3 -m pip install -q --root-user-action=ignore --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .lease/wheels/*.whl || exit 1
    fi
    export PATH=/tmp/site/bin:$PATH PYTHONPATH=$PWD/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# 2. the data: MNIST as carried; CIFAR-100's parts kept as they arrive, joined once all are here
[ -d .lease/mirror ] && cp -rn .lease/mirror/. "$keep/mirror/"
[ -d .lease/cifar100 ] && cp -n .lease/cifar100/* "$keep/parts/"
if [ ! -f "$keep/mirror/cifar100.npz" ] && [ -f "$keep/parts/SHA256SUMS" ]; then
    if (cd "$keep/parts" && sha256sum --check --quiet --status SHA256SUMS 2>/dev/null); then
        cat "$keep/parts"/part-* > "$keep/mirror/cifar100.npz.part"
        if [ "$(sha256sum < "$keep/mirror/cifar100.npz.part" | cut -d' ' -f1)" = "$(cat "$keep/parts/cifar100.npz.sha256")" ]; then
            mv "$keep/mirror/cifar100.npz.part" "$keep/mirror/cifar100.npz" && echo "cifar100.npz joined from its parts"
        else
            rm -f "$keep/mirror/cifar100.npz.part"; echo "cifar100.npz: the joined parts do not match its checksum" >&2
        fi
    else
        echo "cifar100.npz: $(ls "$keep/parts" | grep -c '^part-') of $(wc -l < "$keep/parts/SHA256SUMS") parts here so far"
    fi
fi

# 3. train until the budget is nearly spent: SIGTERM then makes every job finish the round it is
#    playing, snapshot it and stop (a round takes seconds here, well inside the 30 s before
#    SIGKILL; Snakemake itself waits for its jobs on SIGTERM); runs whose data is not here yet fail and are
#    tried next call. Runs with a checkpoint start first (the train rule's priority): their work
#    would otherwise wait, or be lost with the machine
snakemake all_runs --configfile "$config" --unlock >/dev/null 2>&1
name=$(python3 -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$config")
finished() { find "results/$name/runs" -name run.json 2>/dev/null | wc -l; }
before=$(finished)
left=$((budget - (SECONDS - start) - 45))
echo "training for at most ${left}s: snakemake all_runs --configfile $config --resources gpu=$jobs, jobs_per_gpu=$jobs"
t0=$SECONDS
timeout -s TERM -k 30 "$left" snakemake all_runs --cores $((jobs + 2)) --configfile "$config" --resources gpu="$jobs" \
    --config jobs_per_gpu="$jobs" runs_per_job="$runs_per_job" mirror="$keep/mirror" --rerun-incomplete --keep-going > "$out/snakemake.log" 2>&1
status=$?
trained=$((SECONDS - t0))
echo "trained for ${trained}s: $(( $(finished) - before )) runs finished in this call, $(finished) in all"
case $status in
    0) echo "snakemake: every run of $config is done" ;;
    124) echo "snakemake: stopped at the budget; the next call goes on (log: \$OUT/snakemake.log)" ;;
    137) echo "snakemake: stopped at the budget (its jobs ended on SIGTERM, snakemake itself only on SIGKILL 30 s later); the next call goes on" ;;
    *) echo "snakemake: exit status $status (some jobs failed; log: \$OUT/snakemake.log):"; tail -n 15 "$out/snakemake.log" ;;
esac

# the end of the log of every training job that failed (none: no file)
find "logs/$name/train" -name '*.log' 2>/dev/null | while read -r log; do
    grep -q -e Traceback -e 'Error' -e ': error:' "$log" && { echo "== $log"; tail -n 12 "$log"; }
done > "$out/failed.log"
[ -s "$out/failed.log" ] && echo "failed training jobs: $(grep -c '^== ' "$out/failed.log") (their logs' ends: \$OUT/failed.log)" || rm -f "$out/failed.log"

# 4. the finished runs' records (run.json, which a run writes last, and its CSVs; no checkpoints) for
#    the way back, with their paths below results/<name>/runs, as `fedgmh store merge` takes them
if [ -d "results/$name/runs" ]; then
    packed=$(bash tools/lease/pack_records.sh "results/$name" "$out/records.tar.gz")
    echo "records: $packed finished runs of $name in \$OUT/records.tar.gz"
    echo "unfinished runs with a checkpoint (kept here): $(find "results/$name/runs" -name checkpoint.pt | wc -l)"
fi
# every training job's log (progress lines with each round's time), for the way back
if [ -d "logs/$name/train" ]; then tar czf "$out/train_logs.tar.gz" "logs/$name/train"; fi
exit 0
