// The handshake of handshake.h over a connected stream socket given as a file descriptor,
// with blocking-style reads and writes bounded by one Deadline: used on the daemon's Unix
// socket (by gyred and by libgyre) and by tests that play a peer byte by byte. Messages are
// a 4-byte little-endian length then the bytes, the length capped at
// kMaxHandshakeMessageBytes before anything is read into memory.
#pragma once

#include <functional>
#include <string>

#include "core/auth/handshake.h"
#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::auth {

// Writes one length-prefixed message; DeadlineExceeded or Unavailable naming `what`.
Status WriteHandshakeMessage(int fd, const std::string& message, Deadline deadline,
                             const std::string& what);
// Reads one length-prefixed message of at most kMaxHandshakeMessageBytes. Unavailable on EOF
// or reset, InvalidArgument for a length over the cap, DeadlineExceeded when the whole
// message has not arrived by `deadline` (a sender of one byte per second gets no longer).
// `*none_read`, if given, says whether it failed before the message's first byte (a
// connection closed between messages, not in the middle of one).
Status ReadHandshakeMessage(int fd, std::string* message, Deadline deadline,
                            const std::string& what, bool* none_read = nullptr);

// Plays the connector on `fd`. On success the connection is authenticated both ways.
// Unavailable with "refused" in the message when the acceptor closed after the proof.
Status ConnectOnFd(int fd, Channel channel, const Credentials& self, int acceptor_rank,
                   Deadline deadline, const std::string& what);

// Plays the acceptor on `fd`. On failure `*refusal` says why; the caller logs, counts and
// closes. An authenticated connector is sent the accepting answer before this returns.
// `on_proven`, if given, runs once the proof checks out and before that answer goes: an
// endpoint that cuts off connections still in the handshake at its cap takes this one off its
// list there, so a proven connector is never cut off after it has been told it is in. If it
// returns false (cut off already), nothing more is sent and the refusal is kOverCap.
Status AcceptOnFd(int fd, Channel channel, const Credentials& self, ReplayGuard* guard,
                  Deadline deadline, Refusal* refusal,
                  const std::function<bool()>& on_proven = nullptr);

}  // namespace gyre::auth
