// The per-job secret that every connection of a job proves it knows. gyrerun generates one
// per job and hands it to each rank in a file only the job's user can read; ranks started by
// hand name such a file with --secret_file or GYRE_SECRET_FILE. The secret never goes
// through the store, the environment or a log: only the file's path does.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "core/base/status.h"

namespace gyre::auth {

// What gyrerun generates.
inline constexpr size_t kGeneratedSecretBytes = 32;
// Anything shorter is refused: it could be guessed by a patient stranger.
inline constexpr size_t kMinSecretBytes = 16;
// A secret file is small; a larger one is not a secret file.
inline constexpr size_t kMaxSecretFileBytes = 4096;
// Names the secret file of the current job.
inline constexpr char kSecretFileEnv[] = "GYRE_SECRET_FILE";

// Key material. An empty Secret means the job runs without one: connections still go
// through the handshake (so job ids, ranks and protocol versions are checked and replays
// refused), but anyone who can reach a port can compute the proofs. The bytes are wiped
// when the object goes away.
class Secret {
 public:
  Secret() = default;
  // InvalidArgument when `key` is shorter than kMinSecretBytes.
  static StatusOr<Secret> FromBytes(std::string key);
  // kGeneratedSecretBytes from the system's random source.
  static StatusOr<Secret> Generate();

  Secret(const Secret& other) = default;
  Secret& operator=(const Secret& other);
  Secret(Secret&& other) noexcept;
  Secret& operator=(Secret&& other) noexcept;
  ~Secret();

  bool empty() const { return key_.empty(); }
  const std::string& key() const { return key_; }

 private:
  explicit Secret(std::string key) : key_(std::move(key)) {}
  void Wipe();

  std::string key_;
};

// Reads a secret file: hexadecimal text (at least 2 * kMinSecretBytes digits; surrounding
// whitespace is ignored). Refuses, naming the path and the rule, a file that is not a
// regular file, is owned by another user, or that group or others may read or write.
StatusOr<Secret> LoadSecretFile(const std::string& path);

// Creates `path` with mode 0600 (it must not exist yet) and writes `secret` in hex.
Status WriteSecretFile(const std::string& path, const Secret& secret);

// The secret named by GYRE_SECRET_FILE, or an empty Secret when the variable is unset.
StatusOr<Secret> SecretFromEnvironment();

}  // namespace gyre::auth
