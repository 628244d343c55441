#!/usr/bin/env bash
# Here, before a GPU lease: everything a bare GPU machine needs to run the workflow, in .lease/
# (ignored by git, carried to the machine by the device tool; tools/lease/README.md):
#   .lease/wheels/    snakemake and its requirements as wheels for the machine's Python, and this project
#   .lease/mirror/    the mirror's MNIST archives (12 MB)
#   .lease/cifar100/  the mirror's cifar100.npz in parts of 40 MB (a call carries at most 64 MiB) and
#                     their checksums; chunk.sh joins them there once all have arrived
#
#   bash tools/lease/prepare.sh /path/to/shared/data [PYTHON_VERSION]     (default 3.12, the GPU image's)
set -euo pipefail
mirror=${1:?usage: bash tools/lease/prepare.sh /path/to/shared/data [PYTHON_VERSION]}
python_version=${2:-3.12}
[ -f pyproject.toml ] && [ -d workflow ] || { echo "run this from the repository root" >&2; exit 1; }
[ -d "$mirror/MNIST" ] || { echo "$mirror/MNIST not found: give the folder of the offline mirror" >&2; exit 1; }
command -v snakemake >/dev/null || { echo "snakemake not found: install the project as the README says" >&2; exit 1; }

rm -rf .lease
mkdir -p .lease/wheels .lease/mirror .lease/cifar100
# this project, and connection_pool (a snakemake requirement published as a source archive only)
python -m pip wheel -q --no-deps -w .lease/wheels . connection_pool==0.0.3
python -m pip download -q --only-binary=:all: --python-version "$python_version" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --find-links .lease/wheels -d .lease/wheels "snakemake==$(snakemake --version)"
cp -r "$mirror/MNIST" .lease/mirror/
if [ -f "$mirror/cifar100.npz" ]; then
    split -b 40M -d "$mirror/cifar100.npz" .lease/cifar100/part-
    (cd .lease/cifar100 && sha256sum part-* > SHA256SUMS)
    sha256sum < "$mirror/cifar100.npz" | cut -d' ' -f1 > .lease/cifar100/cifar100.npz.sha256
fi
du -sh .lease/wheels .lease/mirror .lease/cifar100/part-* 2>/dev/null
