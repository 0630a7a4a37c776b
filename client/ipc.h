// Length-prefixed protobuf messages over a Unix stream socket, with deadlines: the framing
// between libgyre and gyred. A 4-byte little-endian length, capped before anything is
// allocated, then the serialized message.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::ipc {

inline constexpr uint32_t kMaxMessageBytes = 1 << 20;

// Writes all of `msg`; DeadlineExceeded or Unavailable (peer gone) naming `what`.
Status WriteMessage(int fd, const google::protobuf::MessageLite& msg, Deadline deadline,
                    const std::string& what);
// Reads one message; Unavailable on EOF, InvalidArgument on a bad length or bad bytes.
Status ReadMessage(int fd, google::protobuf::MessageLite* msg, Deadline deadline,
                   const std::string& what);

// Connects to the Unix socket at `path`, retrying while it does not exist yet.
StatusOr<int> ConnectUnix(const std::string& path, Deadline deadline);
// Creates a listening Unix socket at `path` with owner-only permissions (0600).
StatusOr<int> ListenUnix(const std::string& path);

}  // namespace gyre::ipc
