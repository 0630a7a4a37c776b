#!/usr/bin/env bash
# Builds gyre (warnings as errors) and runs every test: the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/install-deps.sh
# The multi-host tests run a real two-node Slurm inside network namespaces.
bash tests/hosts/install-slurm.sh || echo "tests/run.sh: Slurm could not be installed; hosts_slurm will skip"
cmake -S . -B build -G Ninja -DGYRE_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j2
ctest --test-dir build -j2 --output-on-failure --timeout 900 "$@"
