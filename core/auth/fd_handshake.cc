#include "core/auth/fd_handshake.h"

#include <cstring>

#include "core/ipc/ipc.h"

namespace gyre::auth {

Status WriteHandshakeMessage(int fd, const std::string& message, Deadline deadline,
                             const std::string& what) {
  if (message.size() > kMaxHandshakeMessageBytes) {
    return InternalError(what + ": handshake message of " + std::to_string(message.size()) +
                         " bytes");
  }
  std::string frame(4, '\0');
  const uint32_t n = static_cast<uint32_t>(message.size());
  for (int i = 0; i < 4; ++i) frame[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  frame += message;
  return ipc::WriteAll(fd, frame.data(), frame.size(), deadline, what);
}

Status ReadHandshakeMessage(int fd, std::string* message, Deadline deadline,
                            const std::string& what, bool* none_read) {
  unsigned char len[4];
  Status first = ipc::ReadAll(fd, len, 1, deadline, what);
  if (none_read != nullptr) *none_read = !first.ok();
  GYRE_RETURN_IF_ERROR(first);
  GYRE_RETURN_IF_ERROR(ipc::ReadAll(fd, len + 1, 3, deadline, what));
  const uint32_t n =
      len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<uint32_t>(len[3]) << 24);
  if (n > kMaxHandshakeMessageBytes) {
    return InvalidArgumentError(what + ": handshake message length " + std::to_string(n) +
                                " exceeds the cap of " + std::to_string(kMaxHandshakeMessageBytes));
  }
  message->assign(n, '\0');
  return ipc::ReadAll(fd, message->data(), n, deadline, what);
}

Status ConnectOnFd(int fd, Channel channel, const Credentials& self, int acceptor_rank,
                   Deadline deadline, const std::string& what) {
  Connector connector(channel, &self, acceptor_rank);
  GYRE_ASSIGN_OR_RETURN(std::string hello, connector.Hello());
  GYRE_RETURN_IF_ERROR(WriteHandshakeMessage(fd, hello, deadline, what));
  std::string challenge;
  GYRE_RETURN_IF_ERROR(ReadHandshakeMessage(fd, &challenge, deadline, what));
  GYRE_ASSIGN_OR_RETURN(std::string proof, connector.Proof(challenge));
  GYRE_RETURN_IF_ERROR(WriteHandshakeMessage(fd, proof, deadline, what));
  std::string ack;
  Status read = ReadHandshakeMessage(fd, &ack, deadline, what);
  if (read.code() == StatusCode::kUnavailable) {
    return UnavailableError(what +
                            ": refused the handshake (closed after the proof); the other "
                            "side logs why: another job, a different secret, or a replay");
  }
  GYRE_RETURN_IF_ERROR(read);
  Status checked = connector.CheckAck(ack);
  if (!checked.ok()) return Status(checked.code(), what + ": " + checked.message());
  return Status::Ok();
}

Status AcceptOnFd(int fd, Channel channel, const Credentials& self, ReplayGuard* guard,
                  Deadline deadline, Refusal* refusal, const std::function<bool()>& on_proven) {
  const std::string what = std::string(ChannelName(channel)) + " handshake";
  Acceptor acceptor(channel, &self, guard);
  // Closed or reset (Unavailable) between two messages, or under a write: the connector left
  // (abandoned); in the middle of a message it sent a truncated one (malformed).
  bool between = false;
  auto io_failed = [&](const Status& s) {
    *refusal = s.code() == StatusCode::kDeadlineExceeded         ? Refusal::kTimeout
               : s.code() == StatusCode::kUnavailable && between ? Refusal::kAbandoned
                                                                 : Refusal::kMalformed;
    return s;
  };
  std::string hello;
  Status read = ReadHandshakeMessage(fd, &hello, deadline, what, &between);
  if (!read.ok()) return io_failed(read);
  StatusOr<std::string> challenge = acceptor.Challenge(hello);
  if (!challenge.ok()) {
    *refusal = acceptor.refusal();
    return challenge.status();
  }
  between = true;  // a write the connector's close breaks
  Status wrote = WriteHandshakeMessage(fd, *challenge, deadline, what);
  if (!wrote.ok()) return io_failed(wrote);
  std::string proof;
  read = ReadHandshakeMessage(fd, &proof, deadline, what, &between);
  if (!read.ok()) return io_failed(read);
  Status checked = acceptor.CheckProof(proof);
  if (!checked.ok()) {
    *refusal = acceptor.refusal();
    return checked;
  }
  if (on_proven && !on_proven()) {
    *refusal = Refusal::kOverCap;
    return UnavailableError(what + ": cut off at the cap of connections in the handshake");
  }
  between = true;
  wrote = WriteHandshakeMessage(fd, acceptor.Accept(), deadline, what);
  if (!wrote.ok()) return io_failed(wrote);
  return Status::Ok();
}

}  // namespace gyre::auth
