#!/bin/bash
# A job on a slow link: `slowlink_test.sh CASE`, in a network namespace of its own whose
# loopback is held to a few Mbit/s by tbf. Exit 77: skipped (not root, or no namespaces or tc).
#   moving   a 4 MiB binomial broadcast over 4 ranks takes a few T per hop; the ranks that
#            wait behind a hop (on a rank that is itself receiving or sending) hear nothing
#            from their own peer for longer than T, yet the job moves: it must succeed.
#   stopped  the same link, a rank stopped with SIGSTOP: the others still fail after about T,
#            naming it.
set -u
bin=${GYRE_BIN_DIR:?GYRE_BIN_DIR must name the folder holding gyrerun}
case_name=${1:?usage: slowlink_test.sh moving|stopped}
T=2      # progress timeout
SLACK=1  # max(1 s, T/4)
ns="gyreslow$$"  # this run's own: nothing else uses the name
work=$(mktemp -d /tmp/gyre-slowlink-XXXXXX)
ns_up=0

cleanup() {
  if [ "$ns_up" = 1 ]; then
    # Only processes this test started live in its namespace.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
    ip netns del "$ns" 2>/dev/null
  fi
  [ -n "${GYRE_KEEP_LOGS:-}" ] && echo "logs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$case_name]: $*" >&2
  for f in "$work"/*.out "$work"/*.err; do
    [ -f "$f" ] || continue
    echo "----- $f (last 30 lines)" >&2
    tail -30 "$f" | cut -c1-700 >&2
  done
  exit 1
}

skip() {
  echo "SKIP [$case_name]: $*"
  exit 77
}

[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null && command -v tc >/dev/null || skip "no 'ip' or 'tc'"
ip netns add "$ns" 2>/dev/null || skip "'ip netns add' fails"
ns_up=1
# MTU 1500: tbf drops a packet larger than its burst, and loopback's are 64 KiB.
ip -n "$ns" link set lo mtu 1500 up || fail "cannot bring up lo in $ns"
ip netns exec "$ns" tc qdisc add dev lo root tbf rate 8mbit burst 32kb latency 50ms ||
  skip "tc tbf is not available"

now_ms() { echo $(($(date +%s%N) / 1000000)); }

case_moving() {
  # About 1 MB/s for everything: each 4 MiB hop takes over 4 s, twice T; rank 3 waits on
  # rank 2 while rank 2 receives from rank 0, and rank 0 only sends.
  # T = 3 s here, not 2: a hop still takes well over T, and the ranks' reports of progress to
  # each other (every T/4) have more room on a loaded machine (one run in about ten of a full
  # ctest failed at T = 2 s; it never did alone).
  local t0 t1 tm=3
  t0=$(now_ms)
  ip netns exec "$ns" "$bin/gyrerun" -n 4 --timeout "$tm" --job_timeout 60 -- \
    "$bin/gyre-bench" --op broadcast --algo binomial --sizes 4M -c 1 -n 1 -w 0 \
    >"$work/bench.out" 2>"$work/bench.err" || fail "the job exited $? (a false timeout?)"
  t1=$(now_ms)
  grep -q '# wrong elements in total: 0' "$work/bench.out" || fail "no '0 wrong' from gyre-bench"
  # It did cross the slow link: one broadcast alone is several T.
  [ $((t1 - t0)) -ge $((3 * tm * 1000)) ] ||
    fail "the job took $((t1 - t0)) ms: the link is not slow enough for this test"
  echo "PASS [moving]: 4 MiB binomial broadcast over 8 Mbit/s with T = $tm s in $((t1 - t0)) ms"
}

case_stopped() {
  # 256 KiB allreduces in a loop; rank 2 stops itself before its third.
  ip netns exec "$ns" "$bin/gyrerun" -n 4 --mode embedded --timeout "$T" --job_timeout 60 -- \
    "$bin/gyre-test-client" --check=false --loop_iters=30 --stop_rank=2 --die_after=2 \
    >"$work/stop.out" 2>"$work/stop.err"
  local rc=$?
  [ "$rc" != 0 ] || fail "the job succeeded with rank 2 stopped"
  [ "$rc" != 124 ] || fail "the job ran into --job_timeout: rank 2 was not caught"
  local named=0 r line after
  for r in 0 1 3; do
    line=$(grep -h "rank $r: .*failed after" "$work/stop.out" "$work/stop.err" | grep -v '^  |' |
      head -1)
    [ -n "$line" ] || fail "no failure reported by rank $r"
    echo "$line" | grep -q "rank 2 stalled" || fail "rank $r does not name rank 2 stalled: $line"
    after=$(echo "$line" | sed -n 's/.*failed after \([0-9.]*\) s.*/\1/p' | head -1)
    [ -n "$after" ] || fail "no 'failed after' time from rank $r: $line"
    # No earlier than T, no later than T + slack, plus one 256 KiB step of the loop the
    # rank may have been in when rank 2 stopped.
    awk -v a="$after" -v lo="$T" -v hi="$((T + SLACK + 2))" 'BEGIN { exit !(a >= lo && a <= hi) }' ||
      fail "rank $r failed after $after s, not within [$T, $((T + SLACK + 2))] s"
    named=$((named + 1))
  done
  echo "PASS [stopped]: $named survivors named rank 2 stalled within T + slack"
}

case "$case_name" in
  moving) case_moving ;;
  stopped) case_stopped ;;
  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
