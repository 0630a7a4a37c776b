#include "core/transport/tcp/socket_options.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace gyre {
namespace {

bool IsLoopback(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    if (IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr)) return true;
    // ::ffff:127.x.y.z
    return IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
  }
  return false;
}

bool SameAddress(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

bool PeerOnThisHost(int fd) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof(local), peer_len = sizeof(peer);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return false;
  if (IsLoopback(peer)) return true;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return false;
  return SameAddress(local, peer);
}

StatusOr<std::string> CongestionControl(int fd) {
  char name[64] = {};
  socklen_t len = sizeof(name) - 1;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) {
    return UnavailableError(std::string("cannot read TCP_CONGESTION: ") + std::strerror(errno));
  }
  return std::string(name, ::strnlen(name, len));
}

Status SetCongestionControl(int fd, const std::string& name) {
  if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(),
                   static_cast<socklen_t>(name.size())) != 0) {
    const int err = errno;
    std::string why = std::strerror(err);
    if (err == ENOENT) why = "not built into this kernel";
    if (err == EPERM) {
      why = "not in net.ipv4.tcp_allowed_congestion_control for an unprivileged process";
    }
    return InvalidArgumentError("cannot set TCP congestion control \"" + name + "\": " + why);
  }
  return Status::Ok();
}

}  // namespace gyre
