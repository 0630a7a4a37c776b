// PrefixStore: a view of another Store in which every key is "<prefix>/<key>", so that
// independent users (jobs, communicators, barriers) can share one store without their keys
// meeting.
#pragma once

#include <string>

#include "core/store/store.h"

namespace gyre::store {

class PrefixStore final : public Store {
 public:
  // `base` is not owned and must outlive this object.
  PrefixStore(Store* base, std::string prefix);

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
  // The base store's description with the prefix: "file:///dir (prefix 'job7')".
  std::string Describe() const override;

  const std::string& prefix() const { return prefix_; }
  // The key `key` of a view with prefix `prefix` has in the base store.
  static std::string KeyUnder(const std::string& prefix, const std::string& key) {
    return prefix + "/" + key;
  }

 private:
  std::string Full(const std::string& key) const { return KeyUnder(prefix_, key); }

  Store* const base_;
  const std::string prefix_;
};

}  // namespace gyre::store
