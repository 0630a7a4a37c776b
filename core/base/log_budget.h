// A budget of log lines for an event anyone can cause (a refused connection): at most
// `per_window` lines per `window`, so that whoever can reach a port cannot grow a log without
// bound. The first line let through after some were held back says how many.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

#include "core/base/clock.h"

namespace gyre {

class LogBudget {
 public:
  LogBudget(int per_window, Duration window) : per_window_(per_window), window_(window) {}

  // Whether the event at `now` gets its log line. When it does, `*held_back` is how many
  // events since the last line got none (0 mostly); when it does not, it is counted.
  bool Allow(TimePoint now, int64_t* held_back) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!started_ || now - window_start_ >= window_) {
      started_ = true;
      window_start_ = now;
      logged_ = 0;
    }
    if (logged_ >= per_window_) {
      ++held_back_;
      return false;
    }
    ++logged_;
    *held_back = held_back_;
    held_back_ = 0;
    return true;
  }

  // The words a let-through line ends with when `held_back` events before it got none;
  // empty when none were held back.
  std::string HeldBackNote(int64_t held_back) const {
    if (held_back <= 0) return "";
    return " (" + std::to_string(held_back) +
           " refusals before this one were not logged: at most " + std::to_string(per_window_) +
           " lines per " + FormatDuration(window_) + ")";
  }

 private:
  const int per_window_;
  const Duration window_;
  std::mutex mu_;
  bool started_ = false;
  TimePoint window_start_{};
  int logged_ = 0;
  int64_t held_back_ = 0;
};

}  // namespace gyre
