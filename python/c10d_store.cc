#include "python/c10d_store.h"

#include <chrono>
#include <exception>

#include "python/call_runner.h"

namespace gyre::python {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) {
  return std::vector<uint8_t>(s.begin(), s.end());
}
std::string Text(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }

Status Failed(const char* what, const std::string& key, const std::exception& e) {
  return Status(StatusCode::kUnavailable,
                std::string("torch store ") + what + " of key '" + key + "' failed: " + e.what());
}

std::string Joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += (out.empty() ? "'" : ", '") + k + "'";
  return out;
}

}  // namespace

Status C10dStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  try {
    store_->set(key, Bytes(value));
    return Status();
  } catch (const std::exception& e) {
    return Failed("set", key, e);
  }
}

Status C10dStore::WaitKeys(const std::vector<std::string>& keys, Deadline deadline) {
  const TimePoint start = DeadlineAfter(Duration::zero()).when();
  try {
    // c10d's wait takes a duration; gyre's deadline becomes what is left of it.
    const Duration left = deadline.infinite() ? Seconds(24 * 3600) : Remaining(deadline);
    // Rounded up, so c10d never gives up before gyre's deadline has passed.
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(left);
    if (ms.count() <= 0) ms = std::chrono::milliseconds(1);
    store_->wait(keys, ms);
    return Status();
  } catch (const std::exception& e) {
    const Duration waited = DeadlineAfter(Duration::zero()).when() - start;
    // c10d timing out at (within a rounding of) gyre's deadline is that deadline: say so, so
    // that the rendezvous can name the ranks still missing.
    if (Expired(deadline) || (!deadline.infinite() && Remaining(deadline) <= Millis(5))) {
      return Status(StatusCode::kDeadlineExceeded, "torch store: keys " + Joined(keys) +
                                                       " still missing after " +
                                                       FormatTime(waited) + ": " + e.what());
    }
    return Status(StatusCode::kUnavailable,
                  "torch store: waiting for keys " + Joined(keys) + " failed: " + e.what());
  }
}

StatusOr<std::string> C10dStore::Get(const std::string& key, Deadline deadline) {
  Status s = WaitKeys({key}, deadline);
  if (!s.ok()) return s;
  try {
    return Text(store_->get(key));
  } catch (const std::exception& e) {
    return Failed("get", key, e);
  }
}

StatusOr<std::optional<std::string>> C10dStore::TryGet(const std::string& key, Deadline deadline) {
  try {
    // c10d has no non-blocking get: check first, then get (a key is never deleted by
    // rendezvous, so it cannot vanish in between).
    if (!store_->check({key})) return std::optional<std::string>();
    return std::optional<std::string>(Text(store_->get(key)));
  } catch (const std::exception& e) {
    return Failed("try-get", key, e);
  }
}

StatusOr<int64_t> C10dStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  try {
    return static_cast<int64_t>(store_->add(key, delta));
  } catch (const std::exception& e) {
    return Failed("add", key, e);
  }
}

StatusOr<std::string> C10dStore::CompareSet(const std::string& key, const std::string& expected,
                                            const std::string& desired, Deadline deadline) {
  try {
    if (!expected.empty() && !store_->check({key})) {
      return Status(StatusCode::kNotFound, "torch store: key '" + key + "' does not exist");
    }
    return Text(store_->compareSet(key, Bytes(expected), Bytes(desired)));
  } catch (const std::exception& e) {
    return Failed("compare-set", key, e);
  }
}

Status C10dStore::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  return WaitKeys(keys, deadline);
}

Status C10dStore::Delete(const std::string& key, Deadline deadline) {
  try {
    if (!store_->deleteKey(key)) {
      return Status(StatusCode::kNotFound, "torch store: key '" + key + "' does not exist");
    }
    return Status();
  } catch (const std::exception& e) {
    return Failed("delete", key, e);
  }
}

}  // namespace gyre::python
