// Golden text of one tiny schedule per reducing algorithm (p = 3, plus Rabenseifner at
// p = 4 for two halving steps; reduce at root 1). Each was read step by step against the
// algorithm's description in docs/algorithms_reducing.md; a change here is a change of
// schedule and must be reviewed the same way.
#include <gtest/gtest.h>

#include "core/algo/builders.h"
#include "tests/algo_reduce/reduce_test_util.h"

namespace gyre::algo {
namespace {

struct Golden {
  Collective collective;
  Algorithm algorithm;
  int world_size;
  int64_t count;
  int root;
  const char* text;
};

const Golden kGolden[] = {
    {Collective::kAllreduce, Algorithm::kRing, 3, 4, 0, R"(allreduce ring p=3 count=4 float32 sum
rank 0 (11 steps, scratch 4)
  #0 send in[0+2] -> r1 p1.r0.s0
  #1 recv tmp[0+1] <- r2 p1.r0.s0
  #2 reduce tmp[0+1] += in[3+1] after #1
  #3 send tmp[0+1] -> r1 p1.r1.s0 after #2
  #4 copy out[2+1] = in[2+1]
  #5 recv tmp[2+1] <- r2 p1.r1.s0
  #6 reduce out[2+1] += tmp[2+1] after #4 #5
  #7 send out[2+1] -> r1 p2.r0.s0 after #6
  #8 recv out[0+2] <- r2 p2.r0.s0
  #9 send out[0+2] -> r1 p2.r1.s0 after #8
  #10 recv out[3+1] <- r2 p2.r1.s0
rank 1 (11 steps, scratch 4)
  #0 send in[2+1] -> r2 p1.r0.s0
  #1 recv tmp[0+2] <- r0 p1.r0.s0
  #2 reduce tmp[0+2] += in[0+2] after #1
  #3 send tmp[0+2] -> r2 p1.r1.s0 after #2
  #4 copy out[3+1] = in[3+1]
  #5 recv tmp[2+1] <- r0 p1.r1.s0
  #6 reduce out[3+1] += tmp[2+1] after #4 #5
  #7 send out[3+1] -> r2 p2.r0.s0 after #6
  #8 recv out[2+1] <- r0 p2.r0.s0
  #9 send out[2+1] -> r2 p2.r1.s0 after #8
  #10 recv out[0+2] <- r0 p2.r1.s0
rank 2 (11 steps, scratch 4)
  #0 send in[3+1] -> r0 p1.r0.s0
  #1 recv tmp[0+1] <- r1 p1.r0.s0
  #2 reduce tmp[0+1] += in[2+1] after #1
  #3 send tmp[0+1] -> r0 p1.r1.s0 after #2
  #4 copy out[0+2] = in[0+2]
  #5 recv tmp[2+2] <- r1 p1.r1.s0
  #6 reduce out[0+2] += tmp[2+2] after #4 #5
  #7 send out[0+2] -> r0 p2.r0.s0 after #6
  #8 recv out[3+1] <- r1 p2.r0.s0
  #9 send out[3+1] -> r0 p2.r1.s0 after #8
  #10 recv out[2+1] <- r1 p2.r1.s0
)"},
    {Collective::kAllreduce, Algorithm::kTree, 3, 4, 0, R"(allreduce tree p=3 count=4 float32 sum
rank 0 (7 steps, scratch 8)
  #0 copy out[0+4] = in[0+4]
  #1 recv tmp[0+4] <- r1 p1.r0.s0
  #2 reduce out[0+4] += tmp[0+4] after #0 #1
  #3 recv tmp[4+4] <- r2 p1.r1.s0
  #4 reduce out[0+4] += tmp[4+4] after #2 #3
  #5 send out[0+4] -> r2 p2.r1.s0 after #4
  #6 send out[0+4] -> r1 p2.r0.s0 after #4
rank 1 (3 steps, scratch 0)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+4] -> r0 p1.r0.s0 after #0
  #2 recv out[0+4] <- r0 p2.r0.s0 after #0 #1
rank 2 (3 steps, scratch 0)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+4] -> r0 p1.r1.s0 after #0
  #2 recv out[0+4] <- r0 p2.r1.s0 after #0 #1
)"},
    {Collective::kAllreduce, Algorithm::kRecursiveDoubling, 3, 4, 0,
     R"(allreduce recursive_doubling p=3 count=4 float32 sum
rank 0 (2 steps, scratch 0)
  #0 send in[0+4] -> r1 p1.r0.s0
  #1 recv out[0+4] <- r1 p4.r0.s0 after #0
rank 1 (7 steps, scratch 4)
  #0 copy out[0+4] = in[0+4]
  #1 recv tmp[0+4] <- r0 p1.r0.s0
  #2 reduce out[0+4] += tmp[0+4] after #0 #1
  #3 send out[0+4] -> r2 p2.r0.s0 after #2
  #4 recv tmp[0+4] <- r2 p2.r0.s0 after #1 #2
  #5 reduce out[0+4] += tmp[0+4] after #2 #3 #4
  #6 send out[0+4] -> r0 p4.r0.s0 after #5
rank 2 (4 steps, scratch 4)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+4] -> r1 p2.r0.s0 after #0
  #2 recv tmp[0+4] <- r1 p2.r0.s0
  #3 reduce out[0+4] += tmp[0+4] after #0 #1 #2
)"},
    {Collective::kAllreduce, Algorithm::kRabenseifner, 3, 4, 0,
     R"(allreduce rabenseifner p=3 count=4 float32 sum
rank 0 (2 steps, scratch 0)
  #0 send in[0+4] -> r1 p1.r0.s0
  #1 recv out[0+4] <- r1 p4.r0.s0 after #0
rank 1 (9 steps, scratch 6)
  #0 copy out[0+4] = in[0+4]
  #1 recv tmp[0+4] <- r0 p1.r0.s0
  #2 reduce out[0+4] += tmp[0+4] after #0 #1
  #3 send out[2+2] -> r2 p2.r0.s0 after #2
  #4 recv tmp[4+2] <- r2 p2.r0.s0
  #5 reduce out[0+2] += tmp[4+2] after #2 #4
  #6 send out[0+2] -> r2 p3.r0.s0 after #5
  #7 recv out[2+2] <- r2 p3.r0.s0 after #2 #3
  #8 send out[0+4] -> r0 p4.r0.s0 after #5 #7
rank 2 (6 steps, scratch 2)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+2] -> r1 p2.r0.s0 after #0
  #2 recv tmp[0+2] <- r1 p2.r0.s0
  #3 reduce out[2+2] += tmp[0+2] after #0 #2
  #4 send out[2+2] -> r1 p3.r0.s0 after #3
  #5 recv out[0+2] <- r1 p3.r0.s0 after #0 #1
)"},
    {Collective::kAllreduce, Algorithm::kRabenseifner, 4, 4, 0,
     R"(allreduce rabenseifner p=4 count=4 float32 sum
rank 0 (11 steps, scratch 2)
  #0 copy out[0+4] = in[0+4]
  #1 send out[2+2] -> r2 p2.r0.s0 after #0
  #2 recv tmp[0+2] <- r2 p2.r0.s0
  #3 reduce out[0+2] += tmp[0+2] after #0 #2
  #4 send out[1+1] -> r1 p2.r1.s0 after #3
  #5 recv tmp[0+1] <- r1 p2.r1.s0 after #2 #3
  #6 reduce out[0+1] += tmp[0+1] after #3 #5
  #7 send out[0+1] -> r1 p3.r0.s0 after #6
  #8 recv out[1+1] <- r1 p3.r0.s0 after #3 #4
  #9 send out[0+2] -> r2 p3.r1.s0 after #6 #8
  #10 recv out[2+2] <- r2 p3.r1.s0 after #0 #1
rank 1 (11 steps, scratch 2)
  #0 copy out[0+4] = in[0+4]
  #1 send out[2+2] -> r3 p2.r0.s0 after #0
  #2 recv tmp[0+2] <- r3 p2.r0.s0
  #3 reduce out[0+2] += tmp[0+2] after #0 #2
  #4 send out[0+1] -> r0 p2.r1.s0 after #3
  #5 recv tmp[1+1] <- r0 p2.r1.s0 after #2 #3
  #6 reduce out[1+1] += tmp[1+1] after #3 #5
  #7 send out[1+1] -> r0 p3.r0.s0 after #6
  #8 recv out[0+1] <- r0 p3.r0.s0 after #3 #4
  #9 send out[0+2] -> r3 p3.r1.s0 after #6 #8
  #10 recv out[2+2] <- r3 p3.r1.s0 after #0 #1
rank 2 (11 steps, scratch 2)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+2] -> r0 p2.r0.s0 after #0
  #2 recv tmp[0+2] <- r0 p2.r0.s0
  #3 reduce out[2+2] += tmp[0+2] after #0 #2
  #4 send out[3+1] -> r3 p2.r1.s0 after #3
  #5 recv tmp[0+1] <- r3 p2.r1.s0 after #2 #3
  #6 reduce out[2+1] += tmp[0+1] after #3 #5
  #7 send out[2+1] -> r3 p3.r0.s0 after #6
  #8 recv out[3+1] <- r3 p3.r0.s0 after #3 #4
  #9 send out[2+2] -> r0 p3.r1.s0 after #6 #8
  #10 recv out[0+2] <- r0 p3.r1.s0 after #0 #1
rank 3 (11 steps, scratch 2)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+2] -> r1 p2.r0.s0 after #0
  #2 recv tmp[0+2] <- r1 p2.r0.s0
  #3 reduce out[2+2] += tmp[0+2] after #0 #2
  #4 send out[2+1] -> r2 p2.r1.s0 after #3
  #5 recv tmp[1+1] <- r2 p2.r1.s0 after #2 #3
  #6 reduce out[3+1] += tmp[1+1] after #3 #5
  #7 send out[3+1] -> r2 p3.r0.s0 after #6
  #8 recv out[2+1] <- r2 p3.r0.s0 after #3 #4
  #9 send out[2+2] -> r1 p3.r1.s0 after #6 #8
  #10 recv out[0+2] <- r1 p3.r1.s0 after #0 #1
)"},
    {Collective::kAllreduce, Algorithm::kDirect, 3, 4, 0,
     R"(allreduce direct p=3 count=4 float32 sum
rank 0 (7 steps, scratch 8)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+4] -> r1 p1.r0.s0 after #0
  #2 send out[0+4] -> r2 p1.r0.s0 after #0
  #3 recv tmp[4+4] <- r2 p1.r0.s0
  #4 recv tmp[0+4] <- r1 p1.r0.s0
  #5 reduce out[0+4] += tmp[0+4] after #0 #1 #2 #4
  #6 reduce out[0+4] += tmp[4+4] after #3 #5
rank 1 (8 steps, scratch 8)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+4] -> r2 p1.r0.s0 after #0
  #2 send out[0+4] -> r0 p1.r0.s0 after #0
  #3 recv tmp[0+4] <- r0 p1.r0.s0
  #4 recv tmp[4+4] <- r2 p1.r0.s0
  #5 reduce tmp[0+4] += out[0+4] after #0 #3
  #6 reduce tmp[0+4] += tmp[4+4] after #4 #5
  #7 copy out[0+4] = tmp[0+4] after #0 #1 #2 #5 #6
rank 2 (8 steps, scratch 8)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+4] -> r0 p1.r0.s0 after #0
  #2 send out[0+4] -> r1 p1.r0.s0 after #0
  #3 recv tmp[4+4] <- r1 p1.r0.s0
  #4 recv tmp[0+4] <- r0 p1.r0.s0
  #5 reduce tmp[0+4] += tmp[4+4] after #3 #4
  #6 reduce tmp[0+4] += out[0+4] after #0 #5
  #7 copy out[0+4] = tmp[0+4] after #0 #1 #2 #6
)"},
    {Collective::kAllreduce, Algorithm::kCanonical, 3, 4, 0,
     R"(allreduce canonical p=3 count=4 float32 sum
rank 0 (12 steps, scratch 6)
  #0 send in[2+1] -> r1 p1.r0.s0
  #1 send in[3+1] -> r2 p1.r0.s0
  #2 copy tmp[0+2] = in[0+2]
  #3 recv tmp[4+2] <- r2 p1.r0.s2
  #4 recv tmp[2+2] <- r1 p1.r0.s1
  #5 reduce tmp[0+2] += tmp[2+2] after #2 #4
  #6 reduce tmp[0+2] += tmp[4+2] after #3 #5
  #7 copy out[0+2] = tmp[0+2] after #6
  #8 send out[0+2] -> r1 p2.r0.s0 after #7
  #9 recv out[3+1] <- r2 p2.r0.s0
  #10 send out[3+1] -> r1 p2.r1.s0 after #9
  #11 recv out[2+1] <- r2 p2.r1.s0
rank 1 (12 steps, scratch 3)
  #0 send in[3+1] -> r2 p1.r0.s1
  #1 send in[0+2] -> r0 p1.r0.s1
  #2 copy tmp[1+1] = in[2+1]
  #3 recv tmp[0+1] <- r0 p1.r0.s0
  #4 recv tmp[2+1] <- r2 p1.r0.s2
  #5 reduce tmp[0+1] += tmp[1+1] after #2 #3
  #6 reduce tmp[0+1] += tmp[2+1] after #4 #5
  #7 copy out[2+1] = tmp[0+1] after #6
  #8 send out[2+1] -> r2 p2.r0.s0 after #7
  #9 recv out[0+2] <- r0 p2.r0.s0
  #10 send out[0+2] -> r2 p2.r1.s0 after #9
  #11 recv out[3+1] <- r0 p2.r1.s0
rank 2 (12 steps, scratch 3)
  #0 send in[0+2] -> r0 p1.r0.s2
  #1 send in[2+1] -> r1 p1.r0.s2
  #2 copy tmp[2+1] = in[3+1]
  #3 recv tmp[1+1] <- r1 p1.r0.s1
  #4 recv tmp[0+1] <- r0 p1.r0.s0
  #5 reduce tmp[0+1] += tmp[1+1] after #3 #4
  #6 reduce tmp[0+1] += tmp[2+1] after #2 #5
  #7 copy out[3+1] = tmp[0+1] after #6
  #8 send out[3+1] -> r0 p2.r0.s0 after #7
  #9 recv out[2+1] <- r1 p2.r0.s0
  #10 send out[2+1] -> r0 p2.r1.s0 after #9
  #11 recv out[0+2] <- r1 p2.r1.s0
)"},
    {Collective::kReduce, Algorithm::kBinomial, 3, 4, 1,
     R"(reduce binomial p=3 count=4 float32 sum root=1
rank 0 (1 steps, scratch 0)
  #0 send in[0+4] -> r1 p1.r1.s0
rank 1 (5 steps, scratch 8)
  #0 copy out[0+4] = in[0+4]
  #1 recv tmp[0+4] <- r2 p1.r0.s0
  #2 reduce out[0+4] += tmp[0+4] after #0 #1
  #3 recv tmp[4+4] <- r0 p1.r1.s0
  #4 reduce out[0+4] += tmp[4+4] after #2 #3
rank 2 (1 steps, scratch 0)
  #0 send in[0+4] -> r1 p1.r0.s0
)"},
    {Collective::kReduce, Algorithm::kRingGather, 3, 4, 1,
     R"(reduce ring_gather p=3 count=4 float32 sum root=1
rank 0 (8 steps, scratch 6)
  #0 send in[3+1] -> r1 p1.r0.s0
  #1 recv tmp[2+1] <- r2 p1.r0.s0
  #2 reduce tmp[2+1] += in[2+1] after #1
  #3 send tmp[2+1] -> r1 p1.r1.s0 after #2
  #4 copy tmp[0+2] = in[0+2]
  #5 recv tmp[4+2] <- r2 p1.r1.s0
  #6 reduce tmp[0+2] += tmp[4+2] after #4 #5
  #7 send tmp[0+2] -> r1 p2.r0.s0 after #6
rank 1 (11 steps, scratch 5)
  #0 copy out[0+4] = in[0+4]
  #1 send out[0+2] -> r2 p1.r0.s0 after #0
  #2 recv tmp[1+1] <- r0 p1.r0.s0
  #3 reduce tmp[1+1] += out[3+1] after #0 #2
  #4 send tmp[1+1] -> r2 p1.r1.s0 after #3
  #5 copy tmp[0+1] = out[2+1] after #0
  #6 recv tmp[3+1] <- r0 p1.r1.s0
  #7 reduce tmp[0+1] += tmp[3+1] after #5 #6
  #8 copy out[2+1] = tmp[0+1] after #0 #5 #7
  #9 recv out[3+1] <- r2 p2.r0.s0 after #0 #3
  #10 recv out[0+2] <- r0 p2.r0.s0 after #0 #1
rank 2 (8 steps, scratch 5)
  #0 send in[2+1] -> r0 p1.r0.s0
  #1 recv tmp[1+2] <- r1 p1.r0.s0
  #2 reduce tmp[1+2] += in[0+2] after #1
  #3 send tmp[1+2] -> r0 p1.r1.s0 after #2
  #4 copy tmp[0+1] = in[3+1]
  #5 recv tmp[3+1] <- r1 p1.r1.s0
  #6 reduce tmp[0+1] += tmp[3+1] after #4 #5
  #7 send tmp[0+1] -> r1 p2.r0.s0 after #6
)"},
    {Collective::kReduce, Algorithm::kCanonical, 3, 4, 1,
     R"(reduce canonical p=3 count=4 float32 sum root=1
rank 0 (9 steps, scratch 8)
  #0 send in[2+1] -> r1 p1.r0.s0
  #1 send in[3+1] -> r2 p1.r0.s0
  #2 copy tmp[2+2] = in[0+2]
  #3 recv tmp[6+2] <- r2 p1.r0.s2
  #4 recv tmp[4+2] <- r1 p1.r0.s1
  #5 reduce tmp[2+2] += tmp[4+2] after #2 #4
  #6 reduce tmp[2+2] += tmp[6+2] after #3 #5
  #7 copy tmp[0+2] = tmp[2+2] after #6
  #8 send tmp[0+2] -> r1 p2.r0.s0 after #7
rank 1 (11 steps, scratch 3)
  #0 copy out[0+4] = in[0+4]
  #1 send out[3+1] -> r2 p1.r0.s1 after #0
  #2 send out[0+2] -> r0 p1.r0.s1 after #0
  #3 copy tmp[1+1] = out[2+1] after #0
  #4 recv tmp[0+1] <- r0 p1.r0.s0
  #5 recv tmp[2+1] <- r2 p1.r0.s2
  #6 reduce tmp[0+1] += tmp[1+1] after #3 #4
  #7 reduce tmp[0+1] += tmp[2+1] after #5 #6
  #8 copy out[2+1] = tmp[0+1] after #0 #3 #7
  #9 recv out[3+1] <- r2 p2.r0.s0 after #0 #1
  #10 recv out[0+2] <- r0 p2.r0.s0 after #0 #2
rank 2 (9 steps, scratch 4)
  #0 send in[0+2] -> r0 p1.r0.s2
  #1 send in[2+1] -> r1 p1.r0.s2
  #2 copy tmp[3+1] = in[3+1]
  #3 recv tmp[2+1] <- r1 p1.r0.s1
  #4 recv tmp[1+1] <- r0 p1.r0.s0
  #5 reduce tmp[1+1] += tmp[2+1] after #3 #4
  #6 reduce tmp[1+1] += tmp[3+1] after #2 #5
  #7 copy tmp[0+1] = tmp[1+1] after #6
  #8 send tmp[0+1] -> r1 p2.r0.s0 after #7
)"},
    {Collective::kReduceScatter, Algorithm::kRing, 3, 2, 0,
     R"(reduce_scatter ring p=3 count=2 float32 sum
rank 0 (7 steps, scratch 4)
  #0 send in[4+2] -> r1 p1.r0.s0
  #1 recv tmp[0+2] <- r2 p1.r0.s0
  #2 reduce tmp[0+2] += in[2+2] after #1
  #3 send tmp[0+2] -> r1 p1.r1.s0 after #2
  #4 copy out[0+2] = in[0+2]
  #5 recv tmp[2+2] <- r2 p1.r1.s0
  #6 reduce out[0+2] += tmp[2+2] after #4 #5
rank 1 (7 steps, scratch 4)
  #0 send in[0+2] -> r2 p1.r0.s0
  #1 recv tmp[0+2] <- r0 p1.r0.s0
  #2 reduce tmp[0+2] += in[4+2] after #1
  #3 send tmp[0+2] -> r2 p1.r1.s0 after #2
  #4 copy out[0+2] = in[2+2]
  #5 recv tmp[2+2] <- r0 p1.r1.s0
  #6 reduce out[0+2] += tmp[2+2] after #4 #5
rank 2 (7 steps, scratch 4)
  #0 send in[2+2] -> r0 p1.r0.s0
  #1 recv tmp[0+2] <- r1 p1.r0.s0
  #2 reduce tmp[0+2] += in[0+2] after #1
  #3 send tmp[0+2] -> r0 p1.r1.s0 after #2
  #4 copy out[0+2] = in[4+2]
  #5 recv tmp[2+2] <- r1 p1.r1.s0
  #6 reduce out[0+2] += tmp[2+2] after #4 #5
)"},
    {Collective::kReduceScatter, Algorithm::kRecursiveHalving, 3, 2, 0,
     R"(reduce_scatter recursive_halving p=3 count=2 float32 sum
rank 0 (2 steps, scratch 0)
  #0 send in[0+6] -> r1 p1.r0.s0
  #1 recv out[0+2] <- r1 p3.r0.s0
rank 1 (7 steps, scratch 10)
  #0 recv tmp[0+6] <- r0 p1.r0.s0
  #1 reduce tmp[0+6] += in[0+6] after #0
  #2 send tmp[4+2] -> r2 p2.r0.s0 after #1
  #3 recv tmp[6+4] <- r2 p2.r0.s0
  #4 reduce tmp[0+4] += tmp[6+4] after #1 #3
  #5 send tmp[0+2] -> r0 p3.r0.s0 after #4
  #6 copy out[0+2] = tmp[2+2] after #4
rank 2 (4 steps, scratch 6)
  #0 send in[0+4] -> r1 p2.r0.s0
  #1 recv tmp[4+2] <- r1 p2.r0.s0
  #2 reduce tmp[4+2] += in[4+2] after #1
  #3 copy out[0+2] = tmp[4+2] after #2
)"},
    {Collective::kReduceScatter, Algorithm::kCanonical, 3, 2, 0,
     R"(reduce_scatter canonical p=3 count=2 float32 sum
rank 0 (8 steps, scratch 6)
  #0 send in[2+2] -> r1 p1.r0.s0
  #1 send in[4+2] -> r2 p1.r0.s0
  #2 copy tmp[0+2] = in[0+2]
  #3 recv tmp[4+2] <- r2 p1.r0.s2
  #4 recv tmp[2+2] <- r1 p1.r0.s1
  #5 reduce tmp[0+2] += tmp[2+2] after #2 #4
  #6 reduce tmp[0+2] += tmp[4+2] after #3 #5
  #7 copy out[0+2] = tmp[0+2] after #6
rank 1 (8 steps, scratch 6)
  #0 send in[4+2] -> r2 p1.r0.s1
  #1 send in[0+2] -> r0 p1.r0.s1
  #2 copy tmp[2+2] = in[2+2]
  #3 recv tmp[0+2] <- r0 p1.r0.s0
  #4 recv tmp[4+2] <- r2 p1.r0.s2
  #5 reduce tmp[0+2] += tmp[2+2] after #2 #3
  #6 reduce tmp[0+2] += tmp[4+2] after #4 #5
  #7 copy out[0+2] = tmp[0+2] after #6
rank 2 (8 steps, scratch 6)
  #0 send in[0+2] -> r0 p1.r0.s2
  #1 send in[2+2] -> r1 p1.r0.s2
  #2 copy tmp[4+2] = in[4+2]
  #3 recv tmp[2+2] <- r1 p1.r0.s1
  #4 recv tmp[0+2] <- r0 p1.r0.s0
  #5 reduce tmp[0+2] += tmp[2+2] after #3 #4
  #6 reduce tmp[0+2] += tmp[4+2] after #2 #5
  #7 copy out[0+2] = tmp[0+2] after #6
)"},
};

TEST(ReducingGolden, TinySchedulesMatch) {
  for (const Golden& g : kGolden) {
    const CollectiveSpec spec =
        testing::MakeSpec(g.collective, g.algorithm, g.world_size, g.count, g.root);
    SCOPED_TRACE(spec.ToString());
    StatusOr<Schedule> s = BuildSchedule(spec);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(FormatSchedule(*s), g.text);
  }
}

}  // namespace
}  // namespace gyre::algo
