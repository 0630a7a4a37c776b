// Helpers shared by the Store back ends: message formatting, counter parsing and the polling
// backoff. Not part of the public store API.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::store::internal {

// Measures one store call: when it started and how much time its deadline allowed.
class CallTimer {
 public:
  explicit CallTimer(Deadline deadline)
      : start_(SteadyClock::Get()->Now()), budget_(deadline.Remaining(*SteadyClock::Get())) {}
  Duration Elapsed() const { return SteadyClock::Get()->Now() - start_; }
  // "after 1.00 s (deadline 1.00 s)"
  std::string AfterText() const;

 private:
  TimePoint start_;
  Duration budget_;
};

// "<where>: Get of key 'k' timed out: the key was not set after 1.00 s (deadline 1.00 s)"
Status KeyNotSetError(const std::string& where, const char* op, const std::string& key,
                      const CallTimer& timer);
// "<where>: Wait timed out after ...: 2 of 5 keys missing: 'a', 'b'"
Status KeysMissingError(const std::string& where, const std::vector<std::string>& missing,
                        size_t total, const CallTimer& timer);

// "'a', 'b', 'c' and 7 more"
std::string FormatKeyList(const std::vector<std::string>& keys, size_t max_shown = 8);

// Applies Add semantics to the current value of `key` (nullopt when absent): returns the
// new counter value or InvalidArgument for a non-integer value or an int64 overflow.
StatusOr<int64_t> AddToCounter(const std::string& where, const std::string& key,
                               const std::optional<std::string>& current, int64_t delta);

// The CompareSet rule shared by every back end: true when `desired` must be stored.
bool CompareSetMatches(const std::optional<std::string>& current, const std::string& expected);

Status KeyAbsentForCompareSet(const std::string& where, const std::string& key);
Status KeyNotFoundForDelete(const std::string& where, const std::string& key);

// Capped exponential backoff for polling loops.
class Backoff {
 public:
  Backoff(Duration initial, Duration cap) : next_(initial), cap_(cap) {}
  // Sleeps for the next step, never past `deadline`. Returns false when the deadline has
  // already passed (nothing slept).
  bool SleepWithin(Deadline deadline);

 private:
  Duration next_;
  Duration cap_;
};

}  // namespace gyre::store::internal
