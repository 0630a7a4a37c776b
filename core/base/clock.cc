#include "core/base/clock.h"

#include <cstdio>

namespace gyre {

SteadyClock* SteadyClock::Get() {
  static SteadyClock* clock = new SteadyClock();
  return clock;
}

TimePoint ManualClock::Now() const {
  std::lock_guard<std::mutex> lock(mu_);
  return now_;
}

void ManualClock::Advance(Duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ += d;
}

void ManualClock::Set(TimePoint t) {
  std::lock_guard<std::mutex> lock(mu_);
  now_ = t;
}

Deadline Deadline::After(const Clock& clock, Duration d) {
  TimePoint now = clock.Now();
  if (d >= TimePoint::max() - now) return Infinite();
  return Deadline(now + d);
}

Duration Deadline::Remaining(const Clock& clock) const {
  if (infinite()) return Duration::max();
  TimePoint now = clock.Now();
  return now >= when_ ? Duration::zero() : when_ - now;
}

std::string FormatDuration(Duration d) {
  double ns = static_cast<double>(d.count());
  char buf[64];
  // Thresholds sit where the smaller unit would round up to 1000 of itself.
  if (ns >= 999.95e6) {
    std::snprintf(buf, sizeof(buf), "%.2f s", ns / 1e9);
  } else if (ns >= 999.5e3) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", ns / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f us", ns / 1e3);
  }
  return buf;
}

std::string FormatBytes(int64_t b) {
  char buf[64];
  if (b >= (int64_t{1} << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", b / 1048576.0);
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  }
  return buf;
}

std::string FlagValue(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", v);
  return text;
}

std::string FirstBadSecondsFlag(std::initializer_list<SecondsFlag> flags) {
  for (const SecondsFlag& f : flags) {
    // NaN fails every comparison; infinity fails the upper bound.
    if (f.value >= f.min && f.value <= f.max) continue;
    return std::string(f.name) + " " + FlagValue(f.value) + " must be " + f.range;
  }
  return "";
}

}  // namespace gyre
