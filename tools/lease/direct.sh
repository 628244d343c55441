#!/usr/bin/env bash
# On a GPU machine without snakemake, in the repository root: chosen runs' `fedgmh train` commands
# (the plan's, `fedgmh plan --commands`), several at a time, from what `prepare_direct.sh` put in .lease/direct/ (tools/lease/README.md,
# "Without snakemake"). The data come in parts, one call each; what a call brings is kept in
# /tmp/lease-direct, which lasts as long as the machine.
#
#   bash tools/lease/direct.sh store            keep the parts this call carried
#   bash tools/lease/direct.sh start J LOOK_S   join the data, start the runs J at a time (they go on
#                                               after the call returns), show their progress after LOOK_S
#   bash tools/lease/direct.sh collect MAX_S    wait until every run has ended (at most MAX_S), then pack
#                                               the finished runs' records into $OUT/records.tar.gz
set -uo pipefail
meta=.lease/direct/meta
keep=${LEASE_KEEP:-/tmp/lease-direct}
out=${OUT:-$keep/out}
mkdir -p "$keep/parts" "$out"
for part in .lease/direct/part-*; do [ -f "$part" ] && cp "$part" "$keep/parts/"; done

progress() {  # this call's runs only (an earlier call's runs may still be on the machine)
    local finished=0 log out
    cut -f2 "$meta/runs.tsv" | sort -u | while read -r log; do  # a batch's runs share one log
        [ -f "$log" ] && printf '%s: %s\n' "$log" "$(tr '\r' '\n' < "$log" | grep -v '^$' | tail -n 1)"
    done
    while read -r out; do [ -f "$out/run.json" ] && finished=$((finished + 1)); done < <(cut -f1 "$meta/runs.tsv")
    echo "finished runs: $finished of $(wc -l < "$meta/runs.tsv")"
}

case ${1:-} in
store)
    echo "parts here: $(ls "$keep/parts" | wc -l) of $(cat "$meta/parts")" ;;
start)
    jobs=${2:?jobs}; look=${3:-60}
    if [ "$(cat "$meta/parts")" -gt 0 ] && [ ! -d "$keep/mirror" ]; then
        (cd "$keep/parts" && sha256sum --check --quiet "$OLDPWD/$meta/parts.sha256") || { echo "a data part is missing or damaged" >&2; exit 1; }
        mkdir -p "$keep/mirror.part" && cat "$keep/parts"/part-* | tar xf - -C "$keep/mirror.part" && mv "$keep/mirror.part" "$keep/mirror" || exit 1
        echo "data joined: $(ls "$keep/mirror")"
    fi
    mkdir -p "$keep/bin"
    printf '#!/bin/sh\nexec python3 -m fedgmh.cli "$@"\n' > "$keep/bin/fedgmh" && chmod +x "$keep/bin/fedgmh"
    export PATH=$keep/bin:$PATH PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
    root=data  # the config's data_root, as prepare_direct.sh found it (without it: data, the default)
    [ -f "$meta/data_root" ] && root=$(cat "$meta/data_root")
    while read -r dataset; do  # digits is embedded in the code; the others come from the mirror
        if [ "$dataset" = digits ]; then fedgmh download digits --root "$root" || exit 1
        else fedgmh download "$dataset" --root "$root" --mirror "$keep/mirror" || exit 1; fi
    done < "$meta/datasets"
    cp -r "$meta/partitions/." .
    cut -f2 "$meta/runs.tsv" | while read -r log; do mkdir -p "$(dirname "$log")"; done
    if [ "${LEASE_MPS:-1}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
        nvidia-cuda-mps-control -d && echo "MPS daemon started"
    fi
    # a new session, so that the runs outlive this call (the machine keeps them while it is held)
    setsid nohup bash -c "cut -f5 '$meta/runs.tsv' | xargs -d '\n' -P $jobs -n 1 bash -c; echo 'every run has ended'" \
        > "$keep/queue.log" 2>&1 < /dev/null &
    sleep "$look"; progress ;;
collect)
    limit=${2:?seconds}; start=$SECONDS
    until grep -q 'every run has ended' "$keep/queue.log" 2>/dev/null || [ $((SECONDS - start)) -ge "$limit" ]; do sleep 10; done
    progress
    packed=$(bash tools/lease/pack_records.sh results "$out/records.tar.gz")
    if [ "$packed" -gt 0 ]; then echo "records: $packed finished runs in \$OUT/records.tar.gz"; else echo "no finished run yet"; fi
    tar czf "$out/train_logs.tar.gz" $(find logs -type d -name train 2>/dev/null) 2>/dev/null ;;
*)
    echo "usage: bash tools/lease/direct.sh store | start J LOOK_S | collect MAX_S" >&2; exit 2 ;;
esac
