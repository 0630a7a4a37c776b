// Length-prefixed protobuf messages over a stream socket, with deadlines: the framing
// between libgyre and gyred (Unix socket) and of the control path between ranks (TCP). A
// 4-byte little-endian length, capped before anything is allocated, then the message.
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

// Writes / reads exactly n bytes on a non-blocking-capable socket by `deadline`:
// DeadlineExceeded ("<what>: timed out after X"), or Unavailable when the peer is gone.
Status WriteAll(int fd, const void* data, size_t n, Deadline deadline, const std::string& what);
Status ReadAll(int fd, void* data, size_t n, Deadline deadline, const std::string& what);

// Waits without sleeping, for up to `spin`, until a whole length-prefixed message is readable
// on `fd` (or EOF or an error), so the read that follows neither sleeps in the kernel nor
// wakes between the prefix and the body; a wake-up on a busy core waits for the scheduler.
// It never yields the CPU (a yield hands a CPU hog on this core a whole time slice, ms), and
// does nothing when this thread may run on one CPU only: whoever it waits for then needs
// that very CPU.
void SpinForMessage(int fd, Duration spin);

// Whether a program and its daemon should spin-wait for each other (SpinForMessage): only
// when each of the two processes of every rank on this host can have a CPU of its own. When
// they outnumber the CPUs a spinning waiter holds the CPU the other side needs: through the
// daemon, 2 unpinned ranks on 2 CPUs took 250 us per small allreduce spinning, 45-90 without.
// The ranks on this host are GYRE_LOCAL_WORLD_SIZE when set, else all `world_size`.
bool SpinWaitPays(int world_size);

// Connects to the Unix socket at `path`, retrying while it does not exist yet.
StatusOr<int> ConnectUnix(const std::string& path, Deadline deadline);
// Creates a listening Unix socket at `path` with owner-only permissions (0600).
StatusOr<int> ListenUnix(const std::string& path);

// A TCP listener on host:port (port 0: the kernel picks); returns the fd and fills
// `bound` with "host:port".
StatusOr<int> ListenTcp(const std::string& host, int port, std::string* bound);
// Connects to "host:port" within the deadline (no retry: a refused connection means nobody
// listens). Unavailable with strerror's text ("Connection refused" when the port is closed).
StatusOr<int> ConnectTcp(const std::string& address, Deadline deadline);

}  // namespace gyre::ipc
