#!/usr/bin/env bash
# How much of a small collective's measured time is the timing barrier's exit skew.
#
# BENCH.md times every iteration from the end of a barrier to the end of the operation,
# taking the maximum over ranks. With more ranks than cores, when each rank leaves that
# barrier depends on the barrier's shape: a symmetric barrier (gyre's dissemination, Open
# MPI's recursive doubling) lets ranks leave in any order, so a broadcast's non-roots may
# start their clocks long before the root is scheduled; a tree barrier releases the root
# first. This runs broadcast and allreduce, 4 B and 1 KiB, at 4 and 8 ranks (--ranks),
# interleaved, with each implementation's timing barrier set to either shape and to its
# default, and prints the median over rounds of each cell's median.
#
#   bash bench/timing_barrier.sh [--rounds 3] [--ranks "4 8"] [--build build] [--out FILE.jsonl]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
BUILD=build
OUT=""
RANKS="4 8"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --build) BUILD="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --ranks) RANKS="$2"; shift 2 ;;
    *) echo "timing_barrier.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for p in $RANKS; do
  [[ $p =~ ^[1-9][0-9]*$ ]] || { echo "timing_barrier.sh: --ranks takes rank counts, got '$p'" >&2; exit 2; }
done
BIN="$BUILD/bin"
for b in gyrerun gyre-bench gyre-bench-mpi; do
  [[ -x "$BIN/$b" ]] || { echo "timing_barrier.sh: $BIN/$b is missing; build first" >&2; exit 1; }
done
command -v mpirun >/dev/null || { echo "timing_barrier.sh: mpirun missing (openmpi-bin)" >&2; exit 1; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl tcp,self
     --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo)
# Open MPI's barrier algorithms (ompi_info --param coll tuned --level 9): 3 recursive
# doubling, 6 tree; unset is its fixed decision (linear at 4 ranks, as measured).
for round in $(seq 1 "$ROUNDS"); do
  for p in $RANKS; do
    for op in broadcast allreduce; do
      for cfg in gyre:dissemination gyre:binomial mpi:default mpi:3 mpi:6; do
        impl=${cfg%%:*}
        barrier=${cfg#*:}
        out="$WORK/r$round-p$p-$op-$impl-$barrier.jsonl"
        if [[ $impl == gyre ]]; then
          "$BIN/gyrerun" -n "$p" --mode embedded --job_timeout 60 -- "$BIN/gyre-bench" \
            --op "$op" --sizes 4,1K --pin --timing_barrier "$barrier" \
            --impl_name "gyre/$barrier" --jsonl "$out" >/dev/null 2>&1 ||
            echo "timing_barrier.sh: gyre p=$p $op $barrier failed" >&2
        else
          extra=()
          [[ $barrier != default ]] &&
            extra=(--mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_barrier_algorithm "$barrier")
          timeout 60 "${MPI[@]}" "${extra[@]}" -np "$p" "$BIN/gyre-bench-mpi" --op "$op" \
            --sizes 4,1K --pin --algo_label "barrier_$barrier" --jsonl "$out" >/dev/null 2>&1 ||
            echo "timing_barrier.sh: Open MPI p=$p $op barrier $barrier failed" >&2
        fi
      done
    done
  done
  echo "round $round of $ROUNDS done" >&2
done
cat "$WORK"/*.jsonl > "$WORK/all.jsonl"
[[ -n "$OUT" ]] && cp "$WORK/all.jsonl" "$OUT"
python3 - "$WORK/all.jsonl" $RANKS <<'EOF'
import collections, json, statistics, sys
cells = collections.defaultdict(list)
for line in open(sys.argv[1]):
    j = json.loads(line)
    if "op" not in j:
        continue
    label = j["impl"] if j["impl"].startswith("gyre") else "openmpi/" + j["algo"].replace("barrier_", "")
    cells[(j["op"], j["ranks"], j["bytes"], label)].append(j["median_us"])
labels = ["gyre/dissemination", "openmpi/3", "gyre/binomial", "openmpi/6", "openmpi/default"]
print("| op | p | size | " + " | ".join(labels) + " |")
print("|---|---|---|" + "---|" * len(labels))
for op in ["broadcast", "allreduce"]:
    for p in [int(x) for x in sys.argv[2:]]:
        for b in [4, 1024]:
            row = []
            for l in labels:
                v = cells.get((op, p, b, l))
                row.append("%.1f us" % statistics.median(v) if v else "-")
            print("| %s | %d | %s | %s |" % (op, p, "4 B" if b == 4 else "1 KiB", " | ".join(row)))
EOF
