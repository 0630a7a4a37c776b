// The 2-D and hierarchical allreduce on real ranks: the in-process loopback and TCP on
// 127.0.0.1, called through Communicator::Run with the shape in the spec, every rank compared
// with a sequential sum.
#include <gtest/gtest.h>

#include "core/comm/selfcheck.h"
#include "tests/sim/grid_shapes.h"
#include "tests/world/world.h"
#include "tests/world/world_factories.h"

namespace gyre {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

using testing::GridShapes;

CollectiveSpec Grid(Algorithm a, int p, int shape, int64_t count) {
  return testing::GridSpec(a, p, shape, count);
}

// Runs `spec` on p real ranks of `factory` (in place or not) and checks every rank.
void RunOnWorld(const testing::TransportFactory& factory, CollectiveSpec spec, bool in_place,
                int64_t segment_bytes, const std::string& peer_text = "") {
  const int p = spec.world_size;
  auto world = testing::MakeWorld(factory, p);
  ASSERT_TRUE(world.ok()) << world.status();
  if (p > 1 && !peer_text.empty()) {
    EXPECT_NE((*world)[0]->transport()->DescribePeer(1).find(peer_text), std::string::npos)
        << (*world)[0]->transport()->DescribePeer(1);
  }
  std::vector<std::vector<unsigned char>> inputs(p), outputs(p);
  for (int r = 0; r < p; ++r) inputs[r] = MakeInput(spec, r);
  for (int r = 0; r < p; ++r) {
    outputs[r] = in_place ? inputs[r] : std::vector<unsigned char>(inputs[r].size());
  }
  const std::vector<Status> st = testing::RunOnRanks(p, [&](int r) {
    CallOptions opts;
    opts.algorithm = spec.algorithm;
    opts.segment_bytes = segment_bytes;
    opts.timeout = Seconds(20);
    CollectiveSpec call = spec;
    call.algorithm = Algorithm::kAuto;  // the call option names it, as a user would
    const void* in = in_place ? outputs[r].data() : inputs[r].data();
    return (*world)[r]->Run(call, spec.count ? in : nullptr,
                            spec.count ? outputs[r].data() : nullptr, opts);
  });
  for (int r = 0; r < p; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r];
    EXPECT_EQ((*world)[r]->last().spec.algorithm, spec.algorithm);
    EXPECT_EQ(FirstDifference(spec, outputs[r], Reference(spec, inputs, r)), "") << "rank " << r;
  }
}

TEST(GridAllreduce, RealRanksOverLoopback) {
  for (Algorithm a : {Algorithm::kTwoD, Algorithm::kHierarchical}) {
    for (int p : {1, 2, 4, 6, 8, 9}) {
      for (int shape : GridShapes(p)) {
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{1000}}) {
          CollectiveSpec s = Grid(a, p, shape, n);
          s.dtype = n == 13 ? DataType::kInt64 : DataType::kFloat32;
          SCOPED_TRACE(s.ToString() + " shape " + std::to_string(shape));
          RunOnWorld(testing::LoopbackFactory(), s, /*in_place=*/n == 1000, 0);
          if (n == 1000) RunOnWorld(testing::LoopbackFactory(), s, false, /*segment_bytes=*/64);
        }
      }
    }
  }
}

TEST(GridAllreduce, RealRanksOverTcp) {
  for (const std::string& name : testing::TransportNames()) {
    if (name == "loopback") continue;
    for (Algorithm a : {Algorithm::kTwoD, Algorithm::kHierarchical}) {
      for (int shape : {2, 3}) {
        CollectiveSpec s = Grid(a, 6, shape, 4099);
        SCOPED_TRACE(name + " " + s.ToString() + " shape " + std::to_string(shape));
        RunOnWorld(testing::FactoryByName(name), s, false, 0, "127.0.0.1");
      }
    }
  }
}

}  // namespace
}  // namespace gyre
