#include "core/store/hash_store.h"

#include "core/store/store_internal.h"

namespace gyre::store {

using internal::CallTimer;

HashStore::HashStore(std::string name) : name_(std::move(name)) {}

std::string HashStore::Describe() const { return "memory://" + name_; }

template <typename Pred>
bool HashStore::WaitLocked(std::unique_lock<std::mutex>& lock, Deadline deadline, Pred done) {
  if (deadline.infinite()) {
    changed_.wait(lock, done);
    return true;
  }
  return changed_.wait_until(lock, deadline.when(), done);
}

Status HashStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(key, value));
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
  return Status::Ok();
}

StatusOr<std::string> HashStore::Get(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  CallTimer timer(deadline);
  std::unique_lock<std::mutex> lock(mu_);
  if (!WaitLocked(lock, deadline, [&] { return data_.count(key) > 0; })) {
    return internal::KeyNotSetError(Describe(), "Get", key, timer);
  }
  return data_.at(key);
}

StatusOr<std::optional<std::string>> HashStore::TryGet(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::optional<std::string>();
  return std::optional<std::string>(it->second);
}

StatusOr<std::vector<std::optional<std::string>>> HashStore::TryGetMany(
    const std::vector<std::string>& keys, Deadline deadline) {
  for (const std::string& key : keys) GYRE_RETURN_IF_ERROR(CheckKey(key));
  std::vector<std::optional<std::string>> values(keys.size());
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = data_.find(keys[i]);
    if (it != data_.end()) values[i] = it->second;
  }
  return values;
}

StatusOr<int64_t> HashStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    std::optional<std::string> current;
    if (it != data_.end()) current = it->second;
    GYRE_ASSIGN_OR_RETURN(result, internal::AddToCounter(Describe(), key, current, delta));
    data_[key] = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

StatusOr<std::string> HashStore::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(key, desired));
  std::string now_stored;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    std::optional<std::string> current;
    if (it != data_.end()) current = it->second;
    if (!internal::CompareSetMatches(current, expected)) {
      if (!current.has_value()) return internal::KeyAbsentForCompareSet(Describe(), key);
      return *current;
    }
    data_[key] = desired;
    now_stored = desired;
  }
  changed_.notify_all();
  return now_stored;
}

bool HashStore::Contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.count(key) > 0;
}

Status HashStore::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const std::string& key : keys) GYRE_RETURN_IF_ERROR(CheckKey(key));
  CallTimer timer(deadline);
  std::unique_lock<std::mutex> lock(mu_);
  auto all_present = [&] {
    for (const std::string& key : keys) {
      if (data_.count(key) == 0) return false;
    }
    return true;
  };
  if (WaitLocked(lock, deadline, all_present)) return Status::Ok();
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (data_.count(key) == 0) missing.push_back(key);
  }
  return internal::KeysMissingError(Describe(), missing, keys.size(), timer);
}

Status HashStore::Delete(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  std::lock_guard<std::mutex> lock(mu_);
  if (data_.erase(key) == 0) return internal::KeyNotFoundForDelete(Describe(), key);
  return Status::Ok();
}

size_t HashStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

}  // namespace gyre::store
