// Length-prefixed protobuf messages over a stream socket, with deadlines: the framing
// between libgyre and gyred (Unix socket) and of the control path between ranks (TCP). A
// 4-byte little-endian length, capped before anything is allocated, then the message.
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::ipc {

inline constexpr uint32_t kMaxMessageBytes = 1 << 20;

// Whether a read first tries the socket or first waits for it to be readable. A reader that
// knows the message cannot be there yet (a request was just sent, or the last one just
// answered) waits first and saves a recv that would only say EAGAIN.
enum class ReadStart { kTryFirst, kWaitFirst };

// Writes all of `msg`; DeadlineExceeded or Unavailable (peer gone) naming `what`.
Status WriteMessage(int fd, const google::protobuf::MessageLite& msg, Deadline deadline,
                    const std::string& what);
// WriteMessage with the descriptor `pass` riding on the message's first bytes (SCM_RIGHTS over
// a Unix socket): the reader's MessageReader holds it (TakeFd). `pass` stays open here.
Status WriteMessageWithFd(int fd, const google::protobuf::MessageLite& msg, int pass,
                          Deadline deadline, const std::string& what);
// Reads one message; Unavailable on EOF, InvalidArgument on a bad length or bad bytes.
Status ReadMessage(int fd, google::protobuf::MessageLite* msg, Deadline deadline,
                   const std::string& what);

// Reads the length-prefixed messages of one socket through a buffer, so a message that has
// arrived whole costs one recv instead of one for the prefix and one for the body: with
// ReadStart::kWaitFirst, a call through the daemon makes two syscalls fewer on each side.
// Bytes read past a message are kept for the next Read, so all reads of the socket go
// through its one MessageReader from its creation on. Errors as ReadMessage's.
// Descriptors that arrive with the bytes (WriteMessageWithFd) are held, in order of arrival,
// until TakeFd hands them out; at most kMaxHeldFds at once (a read that would hold more fails
// and closes them), and those never taken are closed with the reader.
class MessageReader {
 public:
  static constexpr size_t kMaxHeldFds = 4;
  explicit MessageReader(int fd) : fd_(fd) {}
  ~MessageReader();
  MessageReader(const MessageReader&) = delete;
  MessageReader& operator=(const MessageReader&) = delete;
  Status Read(google::protobuf::MessageLite* msg, Deadline deadline, const std::string& what,
              ReadStart start = ReadStart::kTryFirst);
  // The oldest descriptor received and not yet taken (the caller owns it), or -1.
  int TakeFd();
  size_t held_fds() const { return fds_.size(); }
  // Bytes received and not yet handed out: a waiter that spins on the socket (SpinForMessage)
  // must not, while these may already hold the next message.
  size_t buffered() const { return end_ - begin_; }

 private:
  Status Fill(size_t room, Deadline deadline, const std::string& what, TimePoint start);

  int fd_;
  std::vector<int> fds_;  // received, not yet taken; oldest first
  std::vector<char> buf_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

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
// The ranks on this host are GYRE_LOCAL_WORLD_SIZE when set, else all `world_size`;
// InvalidArgument, naming the variable, when it is set to anything but a whole number >= 1.
StatusOr<bool> SpinWaitPays(int world_size);

// Connects to the Unix socket at `path`, retrying until `deadline` while nobody serves it
// yet (after 5 s it says so on stderr, once); something there that is not a socket fails at
// once.
StatusOr<int> ConnectUnix(const std::string& path, Deadline deadline);
// Creates a listening Unix socket at `path` with owner-only permissions (0600). Only a stale
// socket at `path` (one that refuses connections) is replaced: AlreadyExists when another
// process is serving on it or when something other than a socket is there, which is left
// untouched.
StatusOr<int> ListenUnix(const std::string& path);
// What ListenUnix would refuse at `path`, checked without changing anything (a stale socket
// is OK): lets a daemon fail before it joins its job rather than after.
Status CheckUnixSocketPath(const std::string& path);

// A TCP listener on host:port (port 0: the kernel picks); returns the fd and fills
// `bound` with "host:port".
StatusOr<int> ListenTcp(const std::string& host, int port, std::string* bound);
// Connects to "host:port" within the deadline (no retry: a refused connection means nobody
// listens). Unavailable with strerror's text ("Connection refused" when the port is closed).
StatusOr<int> ConnectTcp(const std::string& address, Deadline deadline);

}  // namespace gyre::ipc
