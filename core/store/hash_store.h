// HashStore: an in-memory Store for tests and for the TcpStoreServer to host. Blocking calls
// wait on a condition variable that every write signals.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/store/store.h"

namespace gyre::store {

class HashStore final : public Store {
 public:
  // `name` only shows up in Describe() ("memory://<name>") and so in error messages.
  explicit HashStore(std::string name = "hash-store");

  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  StatusOr<std::string> Get(const std::string& key, Deadline deadline) override;
  StatusOr<std::optional<std::string>> TryGet(const std::string& key, Deadline deadline) override;
  StatusOr<std::vector<std::optional<std::string>>> TryGetMany(const std::vector<std::string>& keys,
                                                               Deadline deadline) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status Delete(const std::string& key, Deadline deadline) override;
  std::string Describe() const override;

  // Whether `key` exists, without copying its value. Never waits.
  bool Contains(const std::string& key) const;

  size_t size() const;

 private:
  // Waits on changed_ until `done()` holds or the deadline passes; returns done().
  template <typename Pred>
  bool WaitLocked(std::unique_lock<std::mutex>& lock, Deadline deadline, Pred done);

  const std::string name_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> data_;
};

}  // namespace gyre::store
