#!/bin/bash
# gyre under a real Slurm: a controller in the root namespace and one slurmd in each of two
# test hosts (tests/hosts/netns.sh), each node declaring 8 CPUs. Runs `srun -N 2 -n 8 gyred
# --run selftest`, the batch script deploy/slurm/run.sbatch, and a loop of allreduces in
# which one rank kills itself, whose survivors must name it. Exit 77 (skipped) when not
# root, without namespaces, or without Slurm (tests/hosts/install-slurm.sh installs it).
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bin=${GYRE_BIN_DIR:?GYRE_BIN_DIR must name the folder holding gyred}
netns="$here/netns.sh"
skip() {
  echo "SKIP [slurm]: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "not root"
for c in slurmctld slurmd srun sbatch munged nsenter unshare; do
  command -v $c >/dev/null || skip "no $c (run tests/hosts/install-slurm.sh)"
done
"$netns" check || skip "network namespaces are not available"
# The test hosts' names and addresses are fixed, so one case at a time on this machine,
# whichever build folder's ctest runs it.
exec 9>/tmp/gyre-netns.lock
flock -w 900 9 || { echo "could not take /tmp/gyre-netns.lock within 900 s" >&2; exit 1; }

work=$(mktemp -d /tmp/gyre-slurm-XXXXXX)
chmod 755 "$work"
export SLURM_CONF=$work/slurm.conf
munged_pid=""
ctld_pid=""
slurmd_pids=()
cleanup() {
  # slurmd before slurmctld, then munged; only the daemons this test started.
  for p in "${slurmd_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${slurmd_pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
  done
  for ns in host0 host1; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  [ -z "$ctld_pid" ] || { kill "$ctld_pid" 2>/dev/null; wait "$ctld_pid" 2>/dev/null; }
  [ -z "$munged_pid" ] || { kill "$munged_pid" 2>/dev/null; wait "$munged_pid" 2>/dev/null; }
  [ -z "$munged_pid" ] || rm -f "$msock" "$msock".*
  "$netns" down 2
  [ -n "${GYRE_KEEP_LOGS:-}" ] && echo "logs kept in $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL [slurm]: $*" >&2
  for f in "$work"/*.log "$work"/*.out "$work"/*.err; do
    [ -f "$f" ] || continue
    echo "----- $f (last 20 lines)" >&2
    tail -20 "$f" >&2
  done
  exit 1
}

"$netns" up 2 || fail "netns.sh up 2 failed"

# munge, without systemd: its socket folder and the daemon as the munge user.
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
[ -f /etc/munge/munge.key ] || fail "no /etc/munge/munge.key"
msock=/run/munge/gyre-test-$$.socket
runuser -u munge -- /usr/sbin/munged --foreground --socket="$msock" \
  --pid-file="$msock.pid" --log-file="$msock.log" --seed-file="$msock.seed" \
  >"$work/munged.out" 2>&1 &
munged_pid=$!
for _ in $(seq 50); do [ -S "$msock" ] && break; sleep 0.1; done
[ -S "$msock" ] || fail "munged did not start"

ctl=$(hostname)
cat >"$SLURM_CONF" <<CONF
ClusterName=gyretest
SlurmctldHost=$ctl(198.18.0.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$msock
CredType=cred/munge
SlurmctldPort=6917
SlurmdPort=6918
StateSaveLocation=$work/ctld
SlurmdSpoolDir=$work/slurmd-%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd-%n.pid
SlurmctldLogFile=$work/slurmctld.log
SlurmdLogFile=$work/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
NodeName=host0 NodeAddr=198.18.0.1 CPUs=8 State=UNKNOWN
NodeName=host1 NodeAddr=198.18.0.2 CPUs=8 State=UNKNOWN
PartitionName=test Nodes=host0,host1 Default=YES MaxTime=INFINITE State=UP
CONF
mkdir -p "$work/ctld"
/usr/sbin/slurmctld -D -i >"$work/slurmctld.out" 2>&1 &
ctld_pid=$!
# Each slurmd in its host's network namespace (nsenter: `ip netns exec` breaks slurmd) and
# in a mount namespace of its own, where /etc/hosts names the test hosts.
for k in 0 1; do
  unshare --mount --propagation private sh -c "mount --bind /etc/netns/host$k/hosts /etc/hosts &&
    exec nsenter --net=/run/netns/host$k /usr/sbin/slurmd -D -N host$k" \
    >"$work/slurmd$k.out" 2>&1 &
  slurmd_pids+=($!)
done
ok=0
for _ in $(seq 100); do
  if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = 2 ]; then ok=1; break; fi
  sleep 0.2
done
[ $ok = 1 ] || fail "the two nodes did not come up idle: $(sinfo -N 2>&1)"

export GYRE_IFACES='eth*'
# 1. srun: 8 gyred, 4 per node, identity and store host from Slurm's variables.
port=29530
nsenter --net=/run/netns/host0 "$bin/gyre-store" --host 0.0.0.0 --port $port \
  >"$work/store.log" 2>&1 &
store_pid=$!
GYRE_STORE_PORT=$port timeout 60 srun -N 2 -n 8 --ntasks-per-node=4 -l "$bin/gyred" --run selftest \
  >"$work/srun.out" 2>"$work/srun.err" || fail "srun gyred --run selftest exited $?"
kill $store_pid
grep -q 'selftest: all checks passed' "$work/srun.out" || fail "srun: selftest did not pass"
grep -q 'identity from Slurm' "$work/srun.err" || fail "srun: identity not taken from Slurm"
grep -q 'store tcp://host0:29530' "$work/srun.err" || fail "srun: store not on host0"

# 2. The batch script of deploy/slurm, as users would submit it.
python3 -c 'import os; print(os.urandom(32).hex())' >"$work/secret"
chmod 600 "$work/secret"
GYRE_BIN=$bin GYRE_SECRET_FILE=$work/secret timeout 90 sbatch --wait -N 2 \
  --ntasks-per-node=4 --output="$work/sbatch.out" "$root/deploy/slurm/run.sbatch" selftest \
  >"$work/sbatch.submit" 2>&1 || fail "sbatch run.sbatch exited $?"
grep -q 'selftest: all checks passed' "$work/sbatch.out" || fail "sbatch: selftest did not pass"

# 3. A rank killed under srun: every survivor names it, and its host.
port=29531
nsenter --net=/run/netns/host0 "$bin/gyre-store" --host 0.0.0.0 --port $port \
  >"$work/store2.log" 2>&1 &
store_pid=$!
GYRE_MODE=embedded GYRE_STORE_PORT=$port GYRE_TIMEOUT_MS=3000 timeout 60 srun -N 2 -n 8 \
  --ntasks-per-node=4 -l "$bin/gyre-test-client" --check=false --loop_seconds 30 \
  --die_rank 5 --die_after 20 >"$work/kill.out" 2>"$work/kill.err"
rc=$?
kill $store_pid
[ $rc != 0 ] || fail "srun succeeded although rank 5 died"
[ $rc != 124 ] || fail "srun hung after rank 5 died"
named=$(grep -c 'rank 5 dead (pid [0-9]* on host host1' "$work/kill.err")
[ "$named" -ge 1 ] || fail "no survivor named rank 5 on host1 dead"
echo "PASS [slurm] ($named survivor reports name rank 5)"
