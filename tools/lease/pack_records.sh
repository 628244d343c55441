#!/usr/bin/env bash
# The finished runs' records below ROOT - run.json, which a run writes last, and its CSVs; no
# checkpoints - in one archive for the way back from a lease, with their paths below ROOT, as
# `fedgmh store merge` takes them (chunk.sh and direct.sh). Prints how many runs it packed; with
# none it writes no archive.
#
#   bash tools/lease/pack_records.sh ROOT ARCHIVE
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: bash tools/lease/pack_records.sh ROOT ARCHIVE" >&2; exit 2; }
root=$1; archive=$2
list=$(mktemp)
trap 'rm -f "$list"' EXIT
(cd "$root" && find . -path '*/runs/*' -name run.json | LC_ALL=C sort | while read -r record; do
    find "${record%/run.json}" -maxdepth 1 -type f \( -name run.json -o -name '*.csv' \) ! -name '.*'
done) | sed 's#^\./##' > "$list"
packed=$(grep -c '/run.json$' "$list" || true)
if [ "$packed" -gt 0 ]; then tar czf "$archive" -C "$root" -T "$list"; fi
echo "$packed"
