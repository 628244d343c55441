#!/usr/bin/env bash
# Here, before a short GPU lease: chosen runs, ready for tools/lease/direct.sh on a machine without
# snakemake (tools/lease/README.md, "Without snakemake"), in .lease/direct/ (ignored by git):
#   meta/runs.tsv       one line per run, tab-separated: run folder, log, partition, dataset and the
#                       `fedgmh train` command as the workflow's train job runs it, from the plan
#                       (`fedgmh plan --commands`; device cuda, which a job runs as a free GPU slot, and jobs_per_gpu J)
#   meta/partitions/    their partition files, drawn here (the same files a job there would draw)
#   meta/datasets       the datasets to take from the mirror there (`fedgmh download --mirror`)
#   meta/data_root      the config's data_root, where they go there (the runs' `--root`)
#   part-NN             the mirror's files of those datasets as one tar, in parts of at most
#                       PART_MIB (default 54) MiB, one call each: a call carries 64 MiB with the repository
#   meta/parts, meta/parts.sha256   how many parts, and their checksums
#
#   bash tools/lease/prepare_direct.sh MIRROR CONFIG RUN_DIR...     (env JOBS_PER_GPU, default 8;
#        RUNS_PER_JOB, default 1: runs of one batch in one `fedgmh train-group` command; DEVICE, default cuda; PART_MIB)
#   e.g. bash tools/lease/prepare_direct.sh ../shared/data config/table2_full.yaml \
#            results/paper/runs/table2/cifar100_c5_a0.5/fedamp/seed1 ...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bash tools/lease/prepare_direct.sh MIRROR CONFIG RUN_DIR..." >&2; exit 2; }
mirror=$1; config=$2; shift 2
[ -f Snakefile ] && [ -d workflow ] || { echo "run this from the repository root" >&2; exit 1; }
command -v snakemake >/dev/null || { echo "snakemake not found: install the project as the README says" >&2; exit 1; }
meta=.lease/direct/meta
rm -rf .lease/direct && mkdir -p "$meta/partitions"

fedgmh plan --configfile "$config" --config mirror="$mirror" device="${DEVICE:-cuda}" jobs_per_gpu="${JOBS_PER_GPU:-8}" runs_per_job="${RUNS_PER_JOB:-1}" \
    --commands "$@" > "$meta/runs.tsv" || exit 1
# the partitions, drawn here by the workflow's own rule
mapfile -t partitions < <(cut -f3 "$meta/runs.tsv" | sort -u)
snakemake "${partitions[@]}" --configfile "$config" --config mirror="$mirror" device=cpu --cores 1 --quiet > .lease/direct/partitions.log 2>&1 || { tail -n 20 .lease/direct/partitions.log >&2; exit 1; }
for partition in "${partitions[@]}"; do mkdir -p "$meta/partitions/$(dirname "$partition")" && cp "$partition" "$meta/partitions/$partition"; done
# the mirror's files of each dataset (digits is embedded in the code)
cut -f4 "$meta/runs.tsv" | sort -u > "$meta/datasets"
python3 -c "import sys; from fedgmh.plan_cost import load_plan; print(load_plan([sys.argv[1]], []).data)" "$config" > "$meta/data_root"
files=()
while read -r dataset; do
    case $dataset in
        digits) ;;
        mnist) files+=(MNIST) ;;
        fashion_mnist) files+=(FashionMNIST) ;;
        *) [ -f "$mirror/$dataset.npz" ] || { echo "$mirror/$dataset.npz not found" >&2; exit 1; }; files+=("$dataset.npz") ;;
    esac
done < "$meta/datasets"
if [ ${#files[@]} -gt 0 ]; then
    tar cf - -C "$mirror" "${files[@]}" | split -b "${PART_MIB:-54}M" -d - .lease/direct/part-
    (cd .lease/direct && sha256sum part-* > meta/parts.sha256 && ls part-* | wc -l > meta/parts)
else
    echo 0 > "$meta/parts"
fi
echo "$(wc -l < "$meta/runs.tsv") runs, $(cat "$meta/parts") data part(s), partitions: ${partitions[*]}"
du -sh "$meta" .lease/direct/part-* 2>/dev/null || true
