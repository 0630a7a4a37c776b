// The 2-D and hierarchical allreduce: verified schedules for every shape, their shapes and
// validation, and real data through the simulator compared with a sequential sum
// (grid_allreduce_world_test.cc runs them on real ranks).
#include <gtest/gtest.h>

#include "core/algo/builders.h"
#include "core/algo/builders_topo.h"
#include "core/algo/verifier.h"
#include "core/sim/simulator.h"
#include "tests/sim/grid_shapes.h"

namespace gyre {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

using testing::GridShapes;

CollectiveSpec Grid(Algorithm a, int p, int shape, int64_t count) {
  return testing::GridSpec(a, p, shape, count);
}

TEST(GridAllreduce, SchedulesVerifyForEveryShape) {
  int verified = 0;
  for (Algorithm a : {Algorithm::kTwoD, Algorithm::kHierarchical}) {
    for (int p = 1; p <= 12; ++p) {
      for (int shape : GridShapes(p)) {
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{p - 1}, int64_t{13}, int64_t{6} * p}) {
          for (int64_t segment : {int64_t{0}, int64_t{2}}) {
            CollectiveSpec s = Grid(a, p, shape, n);
            s.segment_elems = segment;
            SCOPED_TRACE(s.ToString() + " shape " + std::to_string(shape));
            StatusOr<algo::Schedule> sch = algo::BuildSchedule(s);
            ASSERT_TRUE(sch.ok()) << sch.status();
            ASSERT_TRUE(algo::VerifySchedule(*sch).ok()) << algo::VerifySchedule(*sch);
            ++verified;
          }
        }
      }
    }
  }
  EXPECT_GT(verified, 500);
}

TEST(GridAllreduce, ShapesAndValidation) {
  EXPECT_EQ(algo::TwoDGrid(Grid(Algorithm::kTwoD, 12, 0, 1)).rows, 3);
  EXPECT_EQ(algo::TwoDGrid(Grid(Algorithm::kTwoD, 12, 0, 1)).cols, 4);
  EXPECT_EQ(algo::TwoDGrid(Grid(Algorithm::kTwoD, 7, 0, 1)).rows, 1);  // prime: one ring
  EXPECT_EQ(algo::TwoDGrid(Grid(Algorithm::kTwoD, 12, 6, 1)).cols, 2);
  EXPECT_EQ(algo::HierarchicalGrid(Grid(Algorithm::kHierarchical, 64, 8, 1)).rows, 8);
  EXPECT_EQ(algo::HierarchicalGrid(Grid(Algorithm::kHierarchical, 12, 0, 1)).cols, 3);
  for (Algorithm a : {Algorithm::kTwoD, Algorithm::kHierarchical}) {
    for (int bad : {5, -1, 13}) {
      Status s = algo::ValidateSpec(Grid(a, 12, bad, 100));
      ASSERT_FALSE(s.ok());
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("must divide the world size 12"), std::string::npos) << s;
    }
  }
  EXPECT_EQ(*algo::ParseAlgorithm("two_d"), Algorithm::kTwoD);
  EXPECT_EQ(*algo::ParseAlgorithm("hierarchical"), Algorithm::kHierarchical);
  // Hand-counted traffic of a 2 x 4 grid with n = 16: rows send 3 chunks of 4 twice,
  // columns 1 piece of 2 twice.
  StatusOr<algo::ClosedForm> f = algo::Theory(Grid(Algorithm::kTwoD, 8, 2, 16), 5);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->traffic.msgs_sent, 2 * 3 + 2 * 1);
  EXPECT_EQ(f->traffic.elems_sent, 2 * 3 * 4 + 2 * 1 * 2);
  EXPECT_EQ(f->alpha_terms, 8);
}

TEST(GridAllreduce, RealDataThroughTheSimulator) {
  const std::pair<DataType, ReduceOp> types[] = {{DataType::kFloat32, ReduceOp::kSum},
                                                 {DataType::kInt32, ReduceOp::kSum},
                                                 {DataType::kFloat64, ReduceOp::kAvg},
                                                 {DataType::kUint8, ReduceOp::kMax}};
  const struct {
    int p;
    const char* topology;
  } worlds[] = {{16, "torus2d:4x4"}, {12, "torus2d:3x4"}, {32, "two_level:4x8"}, {6, "ring"}};
  for (Algorithm a : {Algorithm::kTwoD, Algorithm::kHierarchical}) {
    for (const auto& w : worlds) {
      for (int shape : GridShapes(w.p)) {
        for (const auto& [dtype, op] : types) {
          CollectiveSpec s = Grid(a, w.p, shape, 37 * w.p + 5);
          s.dtype = dtype;
          s.op = op;
          SCOPED_TRACE(s.ToString() + " shape " + std::to_string(shape) + " on " + w.topology);
          sim::SimOptions o;
          o.topology = w.topology;
          o.byte_scale = 100;
          StatusOr<sim::SimResult> r = sim::Simulate(s, o);
          ASSERT_TRUE(r.ok()) << r.status();
          ASSERT_TRUE(r->checked);
          EXPECT_TRUE(r->ok) << r->mismatch;
        }
      }
    }
  }
}

}  // namespace
}  // namespace gyre
