#include "core/transport/tcp/socket_options.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <asio/ip/tcp.hpp>
#include <cerrno>
#include <cstring>
#include <sstream>

namespace gyre {
namespace {

// The socket's own (peer = false) or its peer's endpoint; false if there is none.
bool EndpointOf(int fd, bool peer, asio::ip::tcp::endpoint* ep) {
  socklen_t len = static_cast<socklen_t>(ep->capacity());
  const int rc = peer ? ::getpeername(fd, ep->data(), &len) : ::getsockname(fd, ep->data(), &len);
  if (rc != 0) return false;
  ep->resize(len);
  return true;
}

bool IsLoopback(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).is_loopback();
  }
  return a.is_loopback();
}

}  // namespace

bool PeerOnThisHost(int fd) {
  asio::ip::tcp::endpoint local, peer;
  if (!EndpointOf(fd, /*peer=*/true, &peer)) return false;
  if (IsLoopback(peer.address())) return true;
  return EndpointOf(fd, /*peer=*/false, &local) && local.address() == peer.address();
}

std::string PeerAddress(int fd) {
  asio::ip::tcp::endpoint peer;
  if (!EndpointOf(fd, /*peer=*/true, &peer)) return "an unknown address";
  std::ostringstream out;
  out << peer;
  return out.str();
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
