// The executor tells the transport, before each operation, how many payload bytes this rank
// will send in it (Transport::ExpectSend; the TCP transport picks its congestion control by
// it). The figure must be the schedule's own: ring allreduce 2(p-1)n/p, a binomial
// broadcast's root one full buffer per child, a leaf nothing.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "core/transport/loopback.h"
#include "tests/support/forwarding_transport.h"
#include "tests/world/world.h"

namespace gyre::testing {
namespace {

// Forwards everything to a loopback endpoint and keeps what ExpectSend was told.
class RecordingTransport final : public ForwardingTransport {
 public:
  using ForwardingTransport::ForwardingTransport;
  void ExpectSend(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    told_.push_back(bytes);
  }
  std::vector<size_t> Told() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<size_t> out;
    out.swap(told_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<size_t> told_;
};

TEST(ExpectSendTest, EachOperationAnnouncesThisRanksPayloadBytes) {
  constexpr int p = 4;
  constexpr int64_t n = 1024;  // floats: 4 KiB
  std::vector<RecordingTransport*> recorders;
  auto world = MakeWorld(
      [&](int size) -> StatusOr<std::vector<std::unique_ptr<Transport>>> {
        std::vector<std::unique_ptr<Transport>> out;
        for (auto& t : LoopbackHub::CreateWorld(size)) {
          auto r = std::make_unique<RecordingTransport>(std::move(t));
          recorders.push_back(r.get());
          out.push_back(std::move(r));
        }
        return out;
      },
      p);
  ASSERT_TRUE(world.ok()) << world.status();
  auto& comms = *world;

  CallOptions ring;
  ring.algorithm = algo::Algorithm::kRing;
  auto results = RunOnRanks(p, [&](int r) {
    std::vector<float> in(n, 1.0f + r), out(n);
    Status s =
        comms[r]->Allreduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum, ring);
    if (s.ok() && out[n - 1] != 10.0f) return InternalError("wrong sum");
    return s;
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r];
    EXPECT_EQ(recorders[r]->Told(), std::vector<size_t>{2 * (p - 1) * (n / p) * 4}) << "rank " << r;
  }

  CallOptions binomial;
  binomial.algorithm = algo::Algorithm::kBinomial;
  results = RunOnRanks(p, [&](int r) {
    std::vector<float> buf(n, r == 0 ? 3.0f : 0.0f);
    return comms[r]->Broadcast(buf.data(), buf.data(), n, DataType::kFloat32, /*root=*/0, binomial);
  });
  // Root 0 sends to 2 and 1, rank 2 to 3; 1 and 3 only receive.
  const std::vector<size_t> want = {2 * n * 4, 0, n * 4, 0};
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(results[r].ok()) << results[r];
    EXPECT_EQ(recorders[r]->Told(), std::vector<size_t>{want[r]}) << "rank " << r;
  }
}

}  // namespace
}  // namespace gyre::testing
