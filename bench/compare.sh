#!/usr/bin/env bash
# gyre vs Gloo vs Open MPI on this machine, by BENCH.md's method, in one interleaved run.
#
#   bench/compare.sh [--quick] [--build DIR] [--no-build] [compare.py options]
#
# --quick: allreduce, p = 2 and 4, sizes 4 B, 64 KiB, 1 MiB, 16 MiB, one round (< 3 min).
# Default (full): allreduce, broadcast and allgather, p = 2, 4, 8, 4 B to 64 MiB by powers
# of 4, up to three rounds (no round starts after 870 s). It builds the benchmark programs (Gloo's and Open MPI's
# only where libgloo-dev and openmpi are installed), then runs bench/compare.py, which
# writes bench/results/<date>-<quick|full>.md and the raw JSONL next to it.
# Other options (--rounds N, --ops, --ranks, --sizes, --no_prune ...): compare.py --help.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
build="$root/build"
do_build=1
args=()
while (($#)); do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --build=*) build="${1#--build=}"; shift ;;
    --no-build) do_build=0; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if ((do_build)); then
  if [[ ! -f "$build/build.ninja" ]]; then
    timeout 300 cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2
  fi
  # Two jobs at most: the machine has two cores and other builds may share them.
  timeout 1800 ninja -C "$build" -j2 gyre-bench-all >&2
fi

exec python3 -B "$here/compare.py" --build "$build" "${args[@]}"
