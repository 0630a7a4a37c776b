// ScheduleShape: equal for schedules that differ only in tags and buffer offsets, different
// as soon as a peer, a count, a buffer, an order or a dependency differs.
#include <gtest/gtest.h>

#include "core/algo/builders.h"
#include "core/algo/schedule.h"

namespace gyre::algo {
namespace {

Schedule Build(Collective c, Algorithm a, int p, int64_t count) {
  CollectiveSpec spec;
  spec.collective = c;
  spec.algorithm = a;
  spec.world_size = p;
  spec.count = count;
  StatusOr<Schedule> s = BuildSchedule(spec);
  EXPECT_TRUE(s.ok()) << spec.ToString() << ": " << s.status();
  return s.ok() ? *s : Schedule{};
}

uint64_t Shape(Collective c, Algorithm a, int p, int64_t count) {
  return ScheduleShape(Build(c, a, p, count));
}

TEST(ScheduleShapeTest, AlgorithmsThatBuildTheSameScheduleShareAShape) {
  // On one host, hierarchical broadcast's trees send what the binomial tree sends, to the
  // same ranks in the same order; only the tags' phases differ.
  for (int p : {4, 8}) {
    EXPECT_EQ(Shape(Collective::kBroadcast, Algorithm::kBinomial, p, 1000),
              Shape(Collective::kBroadcast, Algorithm::kHierarchical, p, 1000))
        << "p=" << p;
  }
  // At two ranks both allgathers are one exchange of each rank's block.
  EXPECT_EQ(Shape(Collective::kAllgather, Algorithm::kRing, 2, 1000),
            Shape(Collective::kAllgather, Algorithm::kRecursiveDoubling, 2, 1000));
}

TEST(ScheduleShapeTest, DifferentSchedulesHaveDifferentShapes) {
  EXPECT_NE(Shape(Collective::kBroadcast, Algorithm::kBinomial, 4, 1000),
            Shape(Collective::kBroadcast, Algorithm::kChain, 4, 1000));
  EXPECT_NE(Shape(Collective::kAllgather, Algorithm::kRing, 4, 1000),
            Shape(Collective::kAllgather, Algorithm::kRecursiveDoubling, 4, 1000));
  // Allgather's bruck at two ranks goes through scratch space: more steps.
  EXPECT_NE(Shape(Collective::kAllgather, Algorithm::kRing, 2, 1000),
            Shape(Collective::kAllgather, Algorithm::kBruck, 2, 1000));
  // At two ranks recursive doubling allreduce is one exchange of everything, ring two halves.
  EXPECT_NE(Shape(Collective::kAllreduce, Algorithm::kRing, 2, 1000),
            Shape(Collective::kAllreduce, Algorithm::kRecursiveDoubling, 2, 1000));
  EXPECT_NE(Shape(Collective::kAllreduce, Algorithm::kRing, 4, 1000),
            Shape(Collective::kAllreduce, Algorithm::kRing, 4, 1004));
  EXPECT_NE(Shape(Collective::kAllreduce, Algorithm::kRing, 4, 1000),
            Shape(Collective::kAllreduce, Algorithm::kRing, 5, 1000));
}

TEST(ScheduleShapeTest, TagsAndOffsetsDoNotCountEverythingElseDoes) {
  const Schedule base = Build(Collective::kAllreduce, Algorithm::kRing, 4, 1000);
  ASSERT_EQ(base.ranks.size(), 4u);
  const uint64_t shape = ScheduleShape(base);
  auto first = [](Schedule& s, StepKind kind) -> Step& {
    for (Step& st : s.ranks[1].steps) {
      if (st.kind == kind) return st;
    }
    ADD_FAILURE() << "rank 1 has no step of kind " << static_cast<int>(kind);
    return s.ranks[1].steps[0];
  };
  Schedule s = base;
  first(s, StepKind::kSend).tag ^= 0xff;
  first(s, StepKind::kSend).src.offset += 7;
  first(s, StepKind::kRecv).dst.offset += 3;
  EXPECT_EQ(ScheduleShape(s), shape);

  s = base;
  first(s, StepKind::kSend).peer = 3;
  EXPECT_NE(ScheduleShape(s), shape);
  s = base;
  first(s, StepKind::kRecv).dst.count -= 1;
  EXPECT_NE(ScheduleShape(s), shape);
  s = base;
  first(s, StepKind::kReduce).src.buffer = BufferId::kOutput;
  EXPECT_NE(ScheduleShape(s), shape);
  s = base;
  first(s, StepKind::kReduce).deps.pop_back();
  EXPECT_NE(ScheduleShape(s), shape);
  s = base;
  std::swap(s.ranks[1].steps[0], s.ranks[1].steps[1]);
  EXPECT_NE(ScheduleShape(s), shape);
}

}  // namespace
}  // namespace gyre::algo
