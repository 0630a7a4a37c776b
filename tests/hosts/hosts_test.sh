#!/bin/bash
# Multi-host tests on namespaced test hosts (tests/hosts/netns.sh): `hosts_test.sh CASE`.
# Each case builds its own hosts and removes them on exit. Exit 77: skipped (not root, or
# namespaces cannot be made here); CTest counts that as skipped.
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=${GYRE_BIN_DIR:?GYRE_BIN_DIR must name the folder holding gyrerun}
netns="$here/netns.sh"
case_name=${1:?usage: hosts_test.sh CASE}
# The test hosts' names and addresses are fixed, so one case at a time on this machine,
# whichever build folder's ctest runs it.
exec 9>/tmp/gyre-netns.lock
flock -w 900 9 || { echo "could not take /tmp/gyre-netns.lock within 900 s" >&2; exit 1; }
work=$(mktemp -d /tmp/gyre-hosts-XXXXXX)
hosts_up=0
T=3      # progress timeout for the fault cases
SLACK=1  # max(1 s, T/4)

cleanup() {
  # Only processes this test started live in its namespaces.
  for ns in host0 host1; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  [ "$hosts_up" = 0 ] || "$netns" down 2
  [ -n "${GYRE_KEEP_LOGS:-}" ] && echo "logs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$case_name]: $*" >&2
  for f in "$work"/*.out "$work"/*.err; do
    [ -f "$f" ] || continue
    echo "----- $f (last 30 lines)" >&2
    tail -30 "$f" >&2
  done
  exit 1
}

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# up [RATE]: two hosts; skips the test when namespaces cannot be made.
up() {
  "$netns" up 2 "${1:-}"
  local rc=$?
  if [ $rc = 77 ]; then
    echo "SKIP [$case_name]: network namespaces are not available (needs root and 'ip netns')"
    exit 77
  fi
  [ $rc = 0 ] || fail "netns.sh up 2 failed ($rc)"
  hosts_up=1
}

secret() {
  python3 -c 'import os; print(os.urandom(32).hex())' >"$work/secret"
  chmod 600 "$work/secret"
}

# Every rank 0..3 printed "$2" under the prefix of its host (ranks 0-1 on host0, 2-3 on host1).
expect_every_rank() {
  local file=$1 text=$2
  for r in 0 1 2 3; do
    local h=$((r / 2))
    grep -q "^\[host$h rank $r\] .*$text" "$file" ||
      fail "no line '[host$h rank $r] ...$text' in $file"
  done
}

case_fanout() {
  up
  # gyrerun runs on host0, like mpirun on a cluster's first node; every rank goes via --rsh.
  ip netns exec host0 "$bin/gyrerun" --hosts host0:2,host1:2 --rsh 'ip netns exec' \
    --ifaces 'eth*' --run selftest >"$work/selftest.out" 2>"$work/selftest.err" ||
    fail "selftest across hosts exited $?"
  grep -q '^\[host0 rank 0\] selftest: all checks passed' "$work/selftest.out" ||
    fail "no 'selftest: all checks passed' from [host0 rank 0]"
  grep -q 'rank 0 -> rank 2 via eth0 198.18.0.2 (same subnet 198.18.0.0/24)' \
    "$work/selftest.err" || fail "rank 0 did not log its route to rank 2"
  grep -q 'store tcp://198.18.0.1:' "$work/selftest.err" ||
    fail "the store is not served at host0's eth0 address"
  for mode in daemon embedded; do
    ip netns exec host0 "$bin/gyrerun" --hosts host0:2,host1:2 --rsh 'ip netns exec' \
      --mode $mode -- "$bin/gyre-test-client" >"$work/$mode.out" 2>"$work/$mode.err" ||
      fail "test client ($mode mode) across hosts exited $?"
    expect_every_rank "$work/$mode.out" "rank [0-3]: all collectives ok"
    expect_every_rank "$work/$mode.out" "mode=$mode"
  done
  # Through an ssh stand-in (ssh joins its words into one shell command line on the far
  # side): words with spaces and quotes, and the environment, must arrive intact.
  mkdir -p "$work/fake"
  printf '#!/bin/sh\nhost=$1; shift\nexec ip netns exec "$host" sh -c "$*"\n' >"$work/fake/ssh"
  chmod +x "$work/fake/ssh"
  ip netns exec host0 "$bin/gyrerun" --hosts host0:1,host1:1 --rsh "$work/fake/ssh" \
    --mode embedded -- sh -c 'echo "rank $GYRE_RANK on $GYRE_HOST: it'"'"'s *ok*"' \
    >"$work/ssh.out" 2>"$work/ssh.err" || fail "the ssh stand-in fan-out exited $?"
  grep -qF "[host1 rank 1] rank 1 on host1: it's *ok*" "$work/ssh.out" ||
    fail "words or environment were mangled through the ssh stand-in"
  # A hostfile gives the same placement.
  printf '# test hosts\nhost0 slots=2\nhost1:2\n' >"$work/hostfile"
  ip netns exec host0 "$bin/gyrerun" --hostfile "$work/hostfile" --rsh 'ip netns exec' \
    -- "$bin/gyre-test-client" >"$work/hostfile.out" 2>"$work/hostfile.err" ||
    fail "test client with --hostfile exited $?"
  expect_every_rank "$work/hostfile.out" "all collectives ok"
}

case_torchrun() {
  up
  secret
  local pids=()
  for k in 0 1; do
    ip netns exec host$k "$bin/gyrerun" --nnodes 2 --node_rank $k --nproc_per_node 2 \
      --store tcp://host0:29511 --secret_file "$work/secret" --host_name host$k \
      --ifaces 'eth*' -- "$bin/gyre-test-client" >"$work/node$k.out" 2>"$work/node$k.err" &
    pids+=($!)
  done
  for k in 0 1; do wait "${pids[$k]}" || fail "node $k exited $?"; done
  cat "$work/node0.out" "$work/node1.out" >"$work/all.out"
  expect_every_rank "$work/all.out" "rank [0-3]: all collectives ok"
  grep -q 'node 1 of 2: ranks 2-3' "$work/node1.err" || fail "node 1 does not own ranks 2-3"
}

case_loopback() {
  up
  ip netns exec host0 "$bin/gyre-store" --host 0.0.0.0 --port 29512 >"$work/store.err" 2>&1 &
  disown $!
  local pids=()
  for r in 0 1 2 3; do
    local h=$((r / 2))
    # gyred's default --listen is 127.0.0.1: fine on one host, useless across hosts.
    ip netns exec host$h env GYRE_HOST=host$h "$bin/gyred" --rank $r --world_size 4 \
      --store tcp://host0:29512 --job_id loop --run selftest --rendezvous_timeout 10 \
      >"$work/r$r.out" 2>"$work/r$r.err" &
    pids+=($!)
  done
  for r in 0 1 2 3; do
    if wait "${pids[$r]}"; then fail "rank $r joined a multi-host job over loopback"; fi
    grep -q 'the job spans 2 hosts (host0, host1) but rank [0-3] (host host[01], pid [0-9]*) advertises only the loopback address 127.0.0.1:[0-9]*' \
      "$work/r$r.err" || fail "rank $r does not name the loopback rank and address"
  done
}

case_unreachable() {
  up
  secret
  # host1's ranks advertise only an address no other host has a route to.
  # (A veth pair with both ends in host1: this kernel has no dummy interfaces.)
  ip -n host1 link add gside0 type veth peer name gside1 || fail "cannot add a veth in host1"
  ip -n host1 addr add 198.19.99.1/24 dev gside0
  ip -n host1 link set gside1 up
  ip -n host1 link set gside0 up
  local pids=() ifaces=('eth*' 'gside0')
  for k in 0 1; do
    ip netns exec host$k "$bin/gyrerun" --nnodes 2 --node_rank $k --nproc_per_node 2 \
      --store tcp://host0:29513 --secret_file "$work/secret" --host_name host$k \
      --ifaces "${ifaces[$k]}" --rendezvous_timeout 10 --grace_period 1 \
      -- "$bin/gyre-test-client" >"$work/node$k.out" 2>"$work/node$k.err" &
    pids+=($!)
  done
  local start
  start=$(now_ms)
  for k in 0 1; do
    if wait "${pids[$k]}"; then fail "node $k succeeded with an unreachable rank"; fi
  done
  local took=$(($(now_ms) - start))
  [ $took -lt 12000 ] || fail "the rendezvous failure took $took ms (deadline 10 s)"
  for k in 0 1; do
    grep -q 'cannot reach ranks 2-3 (host host1) at any advertised address: .*198.19.99.1:' \
      "$work/node$k.err" || fail "node $k's ranks do not name ranks 2-3 and 198.19.99.1"
  done
}

# Starts a 2x2 job looping allreduces with progress timeout T, in the background.
start_loop() {
  ip netns exec host0 "$bin/gyrerun" --hosts host0:2,host1:2 --rsh 'ip netns exec' \
    --timeout $T --grace_period 1 -- "$bin/gyre-test-client" --check=false --loop_seconds 60 \
    >"$work/loop.out" 2>"$work/loop.err" &
  loop_pid=$!
  # Wait until every rank is inside the loop (bounded).
  for _ in $(seq 100); do
    [ "$(grep -c 'client rank' "$work/loop.out" 2>/dev/null)" = 4 ] && break
    sleep 0.1
  done
  [ "$(grep -c 'client rank' "$work/loop.out")" = 4 ] || fail "the job did not start"
  sleep 1
}

case_partition() {
  up
  start_loop
  ip -n host0 route add blackhole 198.18.0.2/32
  ip -n host1 route add blackhole 198.18.0.1/32
  local start
  start=$(now_ms)
  if wait $loop_pid; then fail "the job succeeded across a partition"; fi
  local took=$(($(now_ms) - start))
  # T for the deadline, slack, then the launcher's settle time and grace period.
  [ $took -lt $(((T + SLACK + 3) * 1000)) ] ||
    fail "gyrerun ended $took ms after the partition (T = $T s)"
  for r in 0 1 2 3; do
    local h=$((r / 2)) other=$((1 - r / 2))
    local line
    line=$(grep -m1 "^\[host$h rank $r\] rank $r: allreduce [0-9]* failed" "$work/loop.err") ||
      fail "rank $r reported no failed allreduce"
    echo "$line" | grep -q "on host host$other" || fail "rank $r does not name host$other: $line"
    echo "$line" | grep -q "unreachable" || fail "rank $r does not call the cut-off ranks unreachable: $line"
    local after
    after=$(echo "$line" | grep -o 'failed after [0-9.]* [m]*s' | head -1)
    case "$after" in
      *" ms") ;;
      *" s") awk -v a="${after#failed after }" -v lim=$((T + SLACK)) \
        'BEGIN { exit !(a + 0 <= lim) }' || fail "rank $r: '$after' is past T + slack" ;;
      *) fail "rank $r: no elapsed time in: $line" ;;
    esac
  done
  # Each side blames the other: gyrerun names both sides and the network between them, not
  # the first rank to exit.
  grep -q "^gyrerun: job failed: the ranks' verdicts contradict each other: ranks 0-1 and ranks 2-3 each report the other side as unreachable, which points at the network between them" \
    "$work/loop.err" || fail "the summary does not name both sides of the partition"
  if grep -q "<- root cause" "$work/loop.err"; then fail "the summary names one rank as the root cause"; fi
  # One verdict from each side (a rank told the other's verdict has none of its own).
  grep -q "^gyrerun: verdict of rank [01]: .*rank [23] unreachable" "$work/loop.err" ||
    fail "no verdict of host0's side"
  grep -q "^gyrerun: verdict of rank [23]: .*rank [01] unreachable" "$work/loop.err" ||
    fail "no verdict of host1's side"
}

case_hostkill() {
  up
  start_loop
  kill -KILL $(ip netns pids host1)
  local start
  start=$(now_ms)
  if wait $loop_pid; then fail "the job succeeded after host1 was lost"; fi
  local took=$(($(now_ms) - start))
  [ $took -lt $(((T + SLACK) * 1000)) ] || fail "gyrerun ended $took ms after host1's ranks died"
  grep -q '^gyrerun: host host1 lost: every process of its ranks 2-3 died (killed by SIGKILL)' \
    "$work/loop.err" || fail "the summary does not name host1 as lost"
  for r in 0 1; do
    grep -q "^\[host0 rank $r\] rank $r: allreduce [0-9]* failed.*rank [23] dead (pid [0-9]* on host host1" \
      "$work/loop.err" || fail "rank $r does not name a dead rank of host1"
  done
}

case_hierarchical() {
  up 1gbit
  # 2 hosts x 4 ranks; hierarchical allreduce takes its node size from the rendezvous.
  ip netns exec host0 "$bin/gyrerun" --hosts host0:4,host1:4 --rsh 'ip netns exec' \
    --mode embedded -- "$bin/gyre-hier-bench" --sizes 4K,1M,4M --iters 1 --algos ring,hierarchical,auto \
    >"$work/hier.out" 2>"$work/hier.err" || fail "gyre-hier-bench exited $?"
  grep -q '^\[host0 rank 0\] # 8 ranks, 4 per host (hierarchical uses it)' "$work/hier.out" ||
    fail "the node size was not learnt from the hosts"
  [ "$(grep -c 'hierarchical' "$work/hier.out")" -ge 4 ] || fail "hierarchical cells missing"
  # Automatic choice goes hierarchical across hosts from 1 MiB, flat below.
  grep -qE '^\[host0 rank 0\] 4096 +auto:recursive_doubling' "$work/hier.out" ||
    fail "auto at 4 KiB is not recursive doubling: $(cat "$work/hier.out")"
  grep -qE '^\[host0 rank 0\] 1048576 +auto:hierarchical' "$work/hier.out" ||
    fail "auto at 1 MiB across hosts is not hierarchical: $(cat "$work/hier.out")"
  grep -q '^\[host0 rank 0\] hier-bench: all results checked' "$work/hier.out" ||
    fail "results were not all checked"
}

"case_$case_name" || fail "case returned $?"
echo "PASS [$case_name]"
