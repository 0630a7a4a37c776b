#!/usr/bin/env bash
# Installs the dependencies, builds gyre and runs the main job on N local ranks (default 4):
#   bash deploy/run-main-job.sh [N] [gyrerun flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
n="${1:-4}"
shift || true
bash deploy/install-deps.sh >/dev/null
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build -j2 gyrerun gyred >/dev/null
exec build/bin/gyrerun -n "$n" "$@"
