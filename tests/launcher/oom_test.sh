#!/bin/bash
# A rank the kernel's out-of-memory killer ends: gyrerun runs in a memory cgroup of its own with
# a small limit, one rank allocates past it, and the failure line puts its SIGKILL down to the
# OOM killer. Needs a memory cgroup this user may make a child of (cgroup v1's memory
# controller, or v2 with the memory controller given to children); exit 77 (skipped) otherwise.
set -u
bin=${GYRE_BIN_DIR:?GYRE_BIN_DIR must name the folder holding gyrerun}
limit=$((96 * 1024 * 1024))
cg=""
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup | head -1)
v2=$(sed -n 's/^0::\(.*\)$/\1/p' /proc/self/cgroup | head -1)
if [ -n "$v1" ] && [ -f "/sys/fs/cgroup/memory${v1%/}/memory.oom_control" ]; then
  cg="/sys/fs/cgroup/memory${v1%/}/gyre-oom-test-$$"
  mkdir "$cg" 2>/dev/null || skip "cannot make a memory cgroup under /sys/fs/cgroup/memory$v1"
  echo "$limit" >"$cg/memory.limit_in_bytes" 2>/dev/null || { rmdir "$cg"; skip "cannot limit $cg"; }
  # No swap to escape into, where the kernel offers the limit.
  [ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes" 2>/dev/null
  counter=memory.oom_control
elif [ -n "$v2" ] && [ -f "/sys/fs/cgroup${v2%/}/memory.events" ]; then
  cg="/sys/fs/cgroup${v2%/}/gyre-oom-test-$$"
  mkdir "$cg" 2>/dev/null || skip "cannot make a cgroup under /sys/fs/cgroup$v2"
  if ! echo "$limit" >"$cg/memory.max" 2>/dev/null; then
    rmdir "$cg"
    skip "no memory controller for a child of /sys/fs/cgroup$v2"
  fi
  echo 0 >"$cg/memory.swap.max" 2>/dev/null
  counter=memory.events
else
  skip "no memory cgroup counts OOM kills here"
fi

cleanup() {
  # Only what this test started is in its cgroup.
  for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && return; sleep 0.2; done
  echo "could not remove $cg" >&2
}
trap cleanup EXIT

out=$(mktemp /tmp/gyre-oom-XXXXXX)
# Rank 1 allocates four times the limit; rank 0 waits.
sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cg" \
  timeout 60 "$bin/gyrerun" -n 2 --mode embedded -- sh -c \
  'if [ "$GYRE_RANK" = 1 ]; then exec "$0" --allocate_mb=384 --sleep_ms=20000; fi; exec "$0" --sleep_ms=20000' \
  "$bin/gyre-fake-rank" >"$out" 2>&1
rc=$?
text=$(cat "$out")
rm -f "$out"
[ "$rc" = 137 ] || fail "gyrerun exited $rc, not 137 (SIGKILL): $text"
echo "$text" | grep -q "rank 1 (pid [0-9]*) was killed by signal SIGKILL (9) after .* (likely the kernel's out-of-memory killer: oom_kill in $cg/$counter rose from 0 to 1)" ||
  fail "no OOM note on the failure line: $text"
echo "PASS: $(echo "$text" | grep 'job failed')"
