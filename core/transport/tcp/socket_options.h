// Per-connection TCP settings that depend on where the peer is.
#pragma once

#include <string>

#include "core/base/status.h"

namespace gyre {

// True when `fd` is a connected TCP socket whose peer is on this host: the peer's address is
// a loopback address or the same address as this end (the kernel then carries the traffic
// over the loopback device whatever the address). False when not connected.
bool PeerOnThisHost(int fd);

// "host:port" of the other end of the connected socket `fd` ("[v6]:port" for IPv6), or "an
// unknown address".
std::string PeerAddress(int fd);

// The socket's congestion control algorithm (TCP_CONGESTION), e.g. "bbr" or "reno".
StatusOr<std::string> CongestionControl(int fd);
// Sets it; an error names the algorithm and the reason (not built into this kernel, or not
// in net.ipv4.tcp_allowed_congestion_control for an unprivileged process).
Status SetCongestionControl(int fd, const std::string& name);

}  // namespace gyre
