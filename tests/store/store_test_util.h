// Helpers for the store tests: a private temp folder per test, deadlines relative to now,
// and raw client sockets for feeding a TcpStoreServer bytes that no well-behaved client
// would send.
#pragma once

#include <string>
#include <vector>

#include "core/auth/handshake.h"
#include "core/base/clock.h"

namespace gyre::store::testing {

inline Deadline In(Duration d) { return Deadline::After(*SteadyClock::Get(), d); }

// A fresh folder under $TEST_TMPDIR (or /tmp), removed with its content on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // Names of the entries in `dir` (not recursive), sorted.
  static std::vector<std::string> List(const std::string& dir);

 private:
  std::string path_;
};

// A blocking TCP socket to 127.0.0.1:port; -1 on failure.
int ConnectRaw(int port);
// Plays the client side of the store handshake on a raw socket as `credentials`.
Status RawHandshake(int fd, const auth::Credentials& credentials = auth::Credentials());
// ConnectRaw and RawHandshake; -1 when either fails.
int ConnectAuthenticated(int port, const auth::Credentials& credentials = auth::Credentials());
bool SendRaw(int fd, const std::string& bytes);
// Reads until the peer closes (true) or `timeout` passes (false); bytes read go to `*got`.
bool WaitForEof(int fd, Duration timeout, std::string* got = nullptr);
// Reads exactly `n` bytes within `timeout`; false on EOF, error or timeout.
bool ReadExactly(int fd, size_t n, Duration timeout, std::string* out);
// A port on 127.0.0.1 that was free a moment ago.
int FreePort();

}  // namespace gyre::store::testing
