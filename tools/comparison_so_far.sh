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
# one record per run: where both configs hold a run (same folder below runs/), paper/'s
mapfile -t runs < <(for config in paper table2_mnist; do
        find "paper_artifacts/$config/runs/table2" -name run.json 2>/dev/null | sed "s#^paper_artifacts/$config/runs/##; s#/run.json\$# $config#"
    done | LC_ALL=C sort -u -k1,1 | awk '{print "paper_artifacts/" $2 "/runs/" $1}')
[ ${#runs[@]} -gt 0 ] || { echo "no full-protocol record of Table 2 is committed" >&2; exit 1; }
mkdir -p "$out"
fedgmh aggregate --runs "${runs[@]}" --experiment table2 --out "$out/table2_results.csv"
fedgmh compare --results "$out/table2_results.csv" --reference reference/fedgmh_paper_tables.csv \
    --out "$out/comparison.md" --csv "$out/comparison.csv"
