// Prometheus counters: counts by collective and status, bytes, failure counters and the
// duration histogram (cumulative buckets) in the text format.
#include "core/comm/metrics.h"

#include <gtest/gtest.h>

namespace gyre {
namespace {

TEST(MetricsTest, CountsAndHistogramInTextFormat) {
  Metrics m;
  m.RecordOperation("allreduce", Status::Ok(), Millis(2), 100, 50);
  m.RecordOperation("allreduce", DeadlineExceededError("x"), Seconds(5), 10, 0);
  m.RecordOperation("broadcast", UnavailableError("y"), Millis(20), 0, 7);
  const std::string t = m.Render(3);
  EXPECT_NE(t.find("gyre_operations_total{rank=\"3\",collective=\"allreduce\",status=\"ok\"} 1"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("collective=\"allreduce\",status=\"DeadlineExceeded\"} 1"), std::string::npos);
  EXPECT_NE(t.find("collective=\"broadcast\",status=\"Unavailable\"} 1"), std::string::npos);
  EXPECT_NE(t.find("gyre_sent_bytes_total{rank=\"3\"} 110"), std::string::npos);
  EXPECT_NE(t.find("gyre_received_bytes_total{rank=\"3\"} 57"), std::string::npos);
  EXPECT_NE(t.find("gyre_deadline_exceeded_total{rank=\"3\"} 1"), std::string::npos);
  EXPECT_NE(t.find("gyre_peer_failures_total{rank=\"3\"} 1"), std::string::npos);
  // 2 ms falls in le=0.003 and above; 20 ms in le=0.03 and above; 5 s only in le=10.
  EXPECT_NE(t.find("le=\"0.001\"} 0"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"0.003\"} 1"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"0.03\"} 2"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"1\"} 2"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"10\"} 3"), std::string::npos) << t;
  EXPECT_NE(t.find("le=\"+Inf\"} 3"), std::string::npos) << t;
  EXPECT_NE(t.find("gyre_operation_duration_seconds_count{rank=\"3\"} 3"), std::string::npos);
}

}  // namespace
}  // namespace gyre
