// Every broadcast, allgather, gather, scatter, alltoall and barrier schedule passes the
// verifier for p = 1..9, awkward counts, every root and with and without segmenting.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/algo/builders.h"
#include "core/algo/verifier.h"

namespace gyre::algo {
namespace {

const Collective kCollectives[] = {Collective::kBroadcast, Collective::kAllgather,
                                   Collective::kGather,    Collective::kScatter,
                                   Collective::kAlltoall,  Collective::kBarrier};

bool Rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kGather || c == Collective::kScatter;
}

std::vector<int64_t> Counts(int p) { return {0, 1, p - 1, p, 13, 1000}; }

TEST(NonReducingScheduleTest, EveryShapeVerifies) {
  int verified = 0;
  for (Collective c : kCollectives) {
    for (Algorithm a : AlgorithmsFor(c)) {
      for (int p = 1; p <= 9; ++p) {
        for (int64_t n : Counts(p)) {
          for (int root = 0; root < (Rooted(c) ? p : 1); ++root) {
            for (int64_t seg : {0, 1, 4}) {
              CollectiveSpec spec;
              spec.collective = c;
              spec.algorithm = a;
              spec.world_size = p;
              spec.count = n;
              spec.root = root;
              spec.segment_elems = seg;
              StatusOr<Schedule> s = BuildSchedule(spec);
              ASSERT_TRUE(s.ok()) << spec.ToString() << ": " << s.status();
              Status v = VerifySchedule(*s);
              ASSERT_TRUE(v.ok()) << spec.ToString() << ": " << v << "\n" << FormatSchedule(*s);
              ++verified;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(verified, 1000);
}

}  // namespace
}  // namespace gyre::algo
