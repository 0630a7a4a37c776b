#include "core/store/prefix_store.h"

#include <glog/logging.h>

namespace gyre::store {

PrefixStore::PrefixStore(Store* base, std::string prefix)
    : base_(base), prefix_(std::move(prefix)) {
  CHECK(base_ != nullptr) << "PrefixStore needs a base store";
}

// Keys are checked before the prefix goes on, so an empty key is refused instead of
// becoming "<prefix>/".
Status PrefixStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return base_->Set(Full(key), value, deadline);
}

StatusOr<std::string> PrefixStore::Get(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return base_->Get(Full(key), deadline);
}

StatusOr<std::optional<std::string>> PrefixStore::TryGet(const std::string& key,
                                                         Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return base_->TryGet(Full(key), deadline);
}

StatusOr<std::vector<std::optional<std::string>>> PrefixStore::TryGetMany(
    const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) {
    GYRE_RETURN_IF_ERROR(CheckKey(key));
    full.push_back(Full(key));
  }
  return base_->TryGetMany(full, deadline);
}

StatusOr<int64_t> PrefixStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return base_->Add(Full(key), delta, deadline);
}

StatusOr<std::string> PrefixStore::CompareSet(const std::string& key, const std::string& expected,
                                              const std::string& desired, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return base_->CompareSet(Full(key), expected, desired, deadline);
}

Status PrefixStore::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) {
    GYRE_RETURN_IF_ERROR(CheckKey(key));
    full.push_back(Full(key));
  }
  return base_->Wait(full, deadline);
}

Status PrefixStore::Delete(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  return base_->Delete(Full(key), deadline);
}

std::string PrefixStore::Describe() const {
  return base_->Describe() + " (prefix " + QuoteKey(prefix_) + ")";
}

}  // namespace gyre::store
