#!/usr/bin/env bash
# The paper's Table 2 next to ours from the full-protocol records committed so far, without training
# anything: every record of Table 2 under paper_artifacts/paper/runs/ (config/table2_full.yaml and the
# paper config) and paper_artifacts/table2_mnist/runs/table2/ (the same runs of config/table2_mnist.yaml),
# aggregated (`fedgmh aggregate`) and compared cell by cell (`fedgmh compare`; a cell with fewer than
# 3 seeds is "reduced protocol"). The workflow writes the complete tables once every run is there;
# until then this is the honest state.
#
#   bash tools/comparison_so_far.sh [OUT]       (default paper_artifacts/paper/so_far)
set -euo pipefail
out=${1:-paper_artifacts/paper/so_far}
mapfile -t runs < <(find paper_artifacts/paper/runs/table2 paper_artifacts/table2_mnist/runs/table2 -name run.json 2>/dev/null \
    | sed 's#/run.json$##' | sort)
[ ${#runs[@]} -gt 0 ] || { echo "no full-protocol record of Table 2 is committed" >&2; exit 1; }
mkdir -p "$out"
fedgmh aggregate --runs "${runs[@]}" --experiment table2 --out "$out/table2_results.csv"
fedgmh compare --results "$out/table2_results.csv" --reference reference/fedgmh_paper_tables.csv \
    --out "$out/comparison.md" --csv "$out/comparison.csv"
