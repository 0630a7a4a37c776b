// Per-rank metrics in Prometheus' text format: operation counts by collective and status,
// bytes sent and received, an operation-duration histogram, and deadline and peer-failure
// counters, all in base units. Cheap to update after every operation; rendered on request.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre {

class Metrics {
 public:
  // `collective`: a static name (algo::CollectiveName, "send", "recv"); it is kept by
  // pointer, so recording builds no string.
  void RecordOperation(const char* collective, const Status& status, Duration elapsed,
                       int64_t bytes_sent, int64_t bytes_received);
  // The text exposition format (version 0.0.4), with `rank` as a label on every series.
  std::string Render(int rank) const;

 private:
  static constexpr std::array<double, 12> kBuckets = {1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3,
                                                      1e-2, 3e-2, 0.1,  0.3,  1.0,  10.0};
  mutable std::mutex mu_;
  std::map<std::pair<const char*, StatusCode>, int64_t> ops_;  // (collective, status)
  int64_t bytes_sent_ = 0, bytes_received_ = 0;
  int64_t deadline_failures_ = 0, peer_failures_ = 0;
  std::array<int64_t, kBuckets.size()> bucket_counts_{};
  int64_t duration_count_ = 0;
  double duration_sum_ = 0;
};

}  // namespace gyre
