#!/usr/bin/env bash
# Here, before a short GPU lease: chosen runs, ready for tools/lease/direct.sh on a machine without
# snakemake (tools/lease/README.md, "Without snakemake"), in .lease/direct/ (ignored by git):
#   meta/commands.txt   the runs' `fedgmh train` commands, as the workflow's train jobs run them
#                       (from a dry run with device cuda, which a job runs as a free GPU slot, and jobs_per_gpu J)
#   meta/partitions/    their partition files, drawn here (the same files a job there would draw)
#   meta/datasets       the datasets to take from the mirror there (`fedgmh download --mirror`)
#   meta/data_root      the config's data_root, where they go there (the runs' `--root`)
#   part-NN             the mirror's files of those datasets as one tar, in parts of at most
#                       PART_MIB (default 54) MiB, one call each: a call carries 64 MiB with the repository
#   meta/parts, meta/parts.sha256   how many parts, and their checksums
#
#   bash tools/lease/prepare_direct.sh MIRROR CONFIG RUN_DIR...     (env JOBS_PER_GPU, default 8;
#        DEVICE, default cuda; PART_MIB)
#   e.g. bash tools/lease/prepare_direct.sh ../shared/data config/table2_full.yaml \
#            results/paper/runs/table2/cifar100_c5_a0.5/fedamp/seed1 ...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: bash tools/lease/prepare_direct.sh MIRROR CONFIG RUN_DIR..." >&2; exit 2; }
mirror=$1; config=$2; shift 2
[ -f Snakefile ] && [ -d workflow ] || { echo "run this from the repository root" >&2; exit 1; }
command -v snakemake >/dev/null || { echo "snakemake not found: install the project as the README says" >&2; exit 1; }
targets=()
for run in "$@"; do targets+=("${run%/}/run.json"); done
meta=.lease/direct/meta
rm -rf .lease/direct && mkdir -p "$meta/partitions"

settings=(--configfile "$config" --config mirror="$mirror" device="${DEVICE:-cuda}" jobs_per_gpu="${JOBS_PER_GPU:-8}")
snakemake -n -p "${targets[@]}" "${settings[@]}" --cores 1 > .lease/direct/dryrun.log 2>&1 \
    || { tail -n 20 .lease/direct/dryrun.log >&2; exit 1; }
sed -n 's/^\(Shell command: \)\{0,1\}\(fedgmh train .*\)$/\2/p' .lease/direct/dryrun.log > "$meta/commands.txt"
[ "$(wc -l < "$meta/commands.txt")" -eq $# ] \
    || { echo "expected $# training commands, the dry run gave $(wc -l < "$meta/commands.txt") (a run already done, or not a run of $config?)" >&2; exit 1; }
# the partitions, drawn here by the workflow's own rule
mapfile -t partitions < <(grep -o -- '--partition [^ ]*' "$meta/commands.txt" | cut -d' ' -f2 | sort -u)
snakemake "${partitions[@]}" --configfile "$config" --config mirror="$mirror" device=cpu --cores 1 --quiet > .lease/direct/partitions.log 2>&1 || { tail -n 20 .lease/direct/partitions.log >&2; exit 1; }
for partition in "${partitions[@]}"; do mkdir -p "$meta/partitions/$(dirname "$partition")" && cp "$partition" "$meta/partitions/$partition"; done
# the mirror's files of each dataset (digits is embedded in the code)
grep -o -- '--dataset [^ ]*' "$meta/commands.txt" | cut -d' ' -f2 | sort -u > "$meta/datasets"
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
echo "$(wc -l < "$meta/commands.txt") runs, $(cat "$meta/parts") data part(s), partitions: ${partitions[*]}"
du -sh "$meta" .lease/direct/part-* 2>/dev/null || true
