#include "core/comm/metrics.h"

#include <sstream>

namespace gyre {

void Metrics::RecordOperation(const char* collective, const Status& status, Duration elapsed,
                              int64_t bytes_sent, int64_t bytes_received) {
  const double s = std::chrono::duration<double>(elapsed).count();
  std::lock_guard<std::mutex> lock(mu_);
  ++ops_[{collective, status.code()}];
  bytes_sent_ += bytes_sent;
  bytes_received_ += bytes_received;
  if (status.code() == StatusCode::kDeadlineExceeded) ++deadline_failures_;
  if (status.code() == StatusCode::kUnavailable) ++peer_failures_;
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (s <= kBuckets[i]) ++bucket_counts_[i];
  }
  ++duration_count_;
  duration_sum_ += s;
}

std::string Metrics::Render(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  const std::string r = "rank=\"" + std::to_string(rank) + "\"";
  os << "# HELP gyre_operations_total Collective operations finished, by collective and status.\n"
     << "# TYPE gyre_operations_total counter\n";
  // By text: one series per (collective, status), in name order.
  std::map<std::pair<std::string, std::string>, int64_t> by_name;
  for (const auto& [key, n] : ops_) {
    by_name[{key.first, key.second == StatusCode::kOk ? "ok" : StatusCodeName(key.second)}] += n;
  }
  for (const auto& [key, n] : by_name) {
    os << "gyre_operations_total{" << r << ",collective=\"" << key.first << "\",status=\""
       << key.second << "\"} " << n << "\n";
  }
  os << "# HELP gyre_sent_bytes_total Payload bytes sent to peers.\n"
     << "# TYPE gyre_sent_bytes_total counter\n"
     << "gyre_sent_bytes_total{" << r << "} " << bytes_sent_ << "\n"
     << "# HELP gyre_received_bytes_total Payload bytes received from peers.\n"
     << "# TYPE gyre_received_bytes_total counter\n"
     << "gyre_received_bytes_total{" << r << "} " << bytes_received_ << "\n"
     << "# HELP gyre_deadline_exceeded_total Operations that failed on a deadline.\n"
     << "# TYPE gyre_deadline_exceeded_total counter\n"
     << "gyre_deadline_exceeded_total{" << r << "} " << deadline_failures_ << "\n"
     << "# HELP gyre_peer_failures_total Operations that failed because a peer was gone.\n"
     << "# TYPE gyre_peer_failures_total counter\n"
     << "gyre_peer_failures_total{" << r << "} " << peer_failures_ << "\n"
     << "# HELP gyre_operation_duration_seconds Time of each collective operation.\n"
     << "# TYPE gyre_operation_duration_seconds histogram\n";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    os << "gyre_operation_duration_seconds_bucket{" << r << ",le=\"" << kBuckets[i] << "\"} "
       << bucket_counts_[i] << "\n";
  }
  os << "gyre_operation_duration_seconds_bucket{" << r << ",le=\"+Inf\"} " << duration_count_
     << "\n"
     << "gyre_operation_duration_seconds_sum{" << r << "} " << duration_sum_ << "\n"
     << "gyre_operation_duration_seconds_count{" << r << "} " << duration_count_ << "\n";
  return os.str();
}

}  // namespace gyre
