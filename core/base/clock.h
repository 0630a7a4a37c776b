// Clocks and deadlines. Every wait in gyre is bounded by a Deadline: an absolute point on a
// steady clock, never a duration that restarts. The clock is injected so tests and the
// simulator can drive time by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>

namespace gyre {

using Duration = std::chrono::nanoseconds;
using TimePoint = std::chrono::time_point<std::chrono::steady_clock, Duration>;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
};

// The process-wide steady clock. Thread-safe; never goes backwards.
class SteadyClock final : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
  static SteadyClock* Get();
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  TimePoint Now() const override;
  void Advance(Duration d);
  void Set(TimePoint t);

 private:
  mutable std::mutex mu_;
  TimePoint now_{};
};

class Deadline {
 public:
  // A deadline that never fires.
  static Deadline Infinite() { return Deadline(TimePoint::max()); }
  static Deadline At(TimePoint t) { return Deadline(t); }
  // `d` from clock->Now(); a non-positive `d` is already expired.
  static Deadline After(const Clock& clock, Duration d);

  TimePoint when() const { return when_; }
  bool infinite() const { return when_ == TimePoint::max(); }
  bool Expired(const Clock& clock) const { return clock.Now() >= when_; }
  // Time left (zero when expired; Duration::max() when infinite).
  Duration Remaining(const Clock& clock) const;
  // The earlier of the two.
  Deadline Min(const Deadline& other) const { return when_ <= other.when_ ? *this : other; }

 private:
  explicit Deadline(TimePoint t) : when_(t) {}
  TimePoint when_;
};

// "1.25 s", "340 ms", "12 us": for error messages.
std::string FormatDuration(Duration d);

// "1.5 MiB", "12.0 KiB", "7 B": for error messages.
std::string FormatBytes(int64_t bytes);

// `s` seconds, saturating: beyond Duration's range (about 292 years; 1e300, infinity) it is
// Duration::max() or min(), which a timeout takes as its longest (Options::timeout caps
// it at kMaxCallTimeout; Deadline::After makes it infinite). NaN is no duration and gives
// zero: code that takes a number from a user refuses NaN first, naming it.
inline Duration Seconds(double s) {
  if (s != s) return Duration::zero();
  const double ns = s * 1e9;
  constexpr double kLimit = 9223372036854775808.0;  // 2^63: the first double beyond int64
  if (ns >= kLimit) return Duration::max();
  if (ns <= -kLimit) return Duration::min();
  return Duration(static_cast<Duration::rep>(ns));
}
inline Duration Millis(int64_t ms) { return std::chrono::milliseconds(ms); }

// A flag's number as the user would write it ("0", "-1.5", "1e+300", "nan"), for errors.
std::string FlagValue(double v);

// A command-line duration in seconds and the range it must lie in (`range` says it in
// words: "from 0.001 to 1e9 seconds").
struct SecondsFlag {
  const char* name;
  double value, min, max;
  const char* range;
};
// The first flag that is NaN, infinite or out of its range, as "<name> <value> must be
// <range>" (the value as written: "nan", "-1", "1e+300"); empty when all are good.
std::string FirstBadSecondsFlag(std::initializer_list<SecondsFlag> flags);

}  // namespace gyre
