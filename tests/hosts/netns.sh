#!/bin/bash
# Test hosts out of network namespaces: `netns.sh up K [RATE]` creates K namespaces
# ${GYRE_NETNS_PREFIX:-host}0..K-1, each with loopback and an eth0 veth into one bridge
# (198.18.0.0/24 by default: host i is 198.18.0.(i+1), the bridge side .254), a hosts file
# naming every test host (ip netns exec mounts /etc/netns/NAME/hosts over /etc/hosts), and,
# given RATE (e.g. 1gbit), a tbf limit on each host's outgoing link. `netns.sh down K`
# removes all of it. Exit status 77 means namespaces cannot be made here (tests skip).
set -u
prefix=${GYRE_NETNS_PREFIX:-host}
net=${GYRE_NETNS_NET:-198.18.0}
bridge=${GYRE_NETNS_BRIDGE:-gyrebr0}

usage() {
  echo "usage: $0 up K [RATE] | down K | check" >&2
  exit 2
}

can_netns() {
  [ "$(id -u)" = 0 ] || { echo "netns.sh: not root" >&2; return 1; }
  command -v ip >/dev/null || { echo "netns.sh: no 'ip' command" >&2; return 1; }
  local probe="gyreprobe$$"
  ip netns add "$probe" 2>/dev/null || { echo "netns.sh: 'ip netns add' fails" >&2; return 1; }
  ip netns del "$probe"
}

down() {
  local k=$1
  for ((i = 0; i < k; i++)); do
    ip netns del "$prefix$i" 2>/dev/null
    ip link del "gv$prefix$i" 2>/dev/null
    rm -rf "/etc/netns/$prefix$i"
  done
  ip link del "$bridge" 2>/dev/null
  return 0
}

up() {
  local k=$1 rate=${2:-}
  can_netns || exit 77
  down "$k"
  set -e
  ip link add "$bridge" type bridge
  ip addr add "$net.254/24" dev "$bridge"
  ip link set "$bridge" up
  local hosts="127.0.0.1 localhost"$'\n'
  for ((i = 0; i < k; i++)); do hosts+="$net.$((i + 1)) host$i"$'\n'; done
  for ((i = 0; i < k; i++)); do
    local ns="$prefix$i" peer="gv$prefix$i"
    ip netns add "$ns"
    ip link add "$peer" type veth peer name eth0 netns "$ns"
    ip link set "$peer" master "$bridge" up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$net.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$rate" ]; then
      # Each host's egress; a burst of 1 ms at the rate keeps TCP's view of the link smooth.
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 20ms
    fi
    mkdir -p "/etc/netns/$ns"
    printf '%s' "$hosts" >"/etc/netns/$ns/hosts"
  done
  set +e
}

case "${1:-}" in
  up) [ $# -ge 2 ] || usage; up "$2" "${3:-}" ;;
  down) [ $# -ge 2 ] || usage; down "$2" ;;
  check) can_netns || exit 77 ;;
  *) usage ;;
esac
