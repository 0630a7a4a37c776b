// On a switch (one port per device, receives unlimited) the simulator runs the cost model
// of core/algo/cost.h, so for every collective and algorithm its time must equal CostOf's
// to the nanosecond, and the closed form wherever FormulaIsExact.
#include <gtest/gtest.h>

#include <cmath>

#include "core/algo/builders.h"
#include "core/algo/cost.h"
#include "core/algo/formulas.h"
#include "core/sim/simulator.h"

namespace gyre::sim {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

struct Params {
  int64_t bandwidth_bps;  // chosen so every float32 message takes whole nanoseconds
  int64_t latency_ns;
};
constexpr Params kParams[] = {{1'000'000'000, 1000}, {4'000'000'000, 250}, {2'000'000'000, 5000}};

std::vector<std::pair<Collective, Algorithm>> AllCases() {
  std::vector<std::pair<Collective, Algorithm>> cases;
  for (int c = 0; c < algo::kNumCollectives; ++c) {
    const Collective coll = static_cast<Collective>(c);
    for (Algorithm a : algo::AlgorithmsFor(coll)) cases.emplace_back(coll, a);
    if (algo::IsReducing(coll)) cases.emplace_back(coll, Algorithm::kCanonical);
  }
  return cases;
}

bool Rooted(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce || c == Collective::kGather ||
         c == Collective::kScatter;
}

// In units of 2^-30 s per simulated nanosecond every cost-model sum is exact in a double.
constexpr double kUnit = 1.0 / (1 << 30);

TEST(SimExactness, SwitchTimeEqualsCostModelForEveryAlgorithm) {
  int checked = 0;
  int formula_checked = 0;
  int param_index = 0;
  for (const auto& [coll, alg] : AllCases()) {
    for (int p : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8} * p, int64_t{1000}}) {
        for (int64_t segment : {int64_t{0}, int64_t{3}}) {
          if (segment > 0 && n > 64) continue;  // pipelining is covered; keep the test fast
          for (int root : {0, p - 1}) {
            if (root != 0 && !Rooted(coll)) continue;
            CollectiveSpec spec;
            spec.collective = coll;
            spec.algorithm = alg;
            spec.world_size = p;
            spec.count = n;
            spec.root = root;
            spec.segment_elems = segment;
            const Params& prm = kParams[param_index++ % 3];
            SCOPED_TRACE(spec.ToString() + " at " + std::to_string(prm.bandwidth_bps) + " B/s, " +
                         std::to_string(prm.latency_ns) + " ns");
            SimOptions o;
            o.topology_options.link = LinkParams{prm.bandwidth_bps, prm.latency_ns};
            o.verify_max_ranks = 0;  // verification has its own tests; this one is about time
            StatusOr<SimResult> r = Simulate(spec, o);
            ASSERT_TRUE(r.ok()) << r.status();
            EXPECT_TRUE(r->ok) << r->mismatch;

            StatusOr<algo::Schedule> schedule = algo::BuildSchedule(spec);
            ASSERT_TRUE(schedule.ok());
            const double ns_per_byte = 1e9 / static_cast<double>(prm.bandwidth_bps);
            algo::CostParams exact;
            exact.alpha_s = static_cast<double>(prm.latency_ns) * kUnit;
            exact.beta_s_per_byte = ns_per_byte * kUnit;
            StatusOr<algo::ScheduleCost> cost = algo::CostOf(*schedule, exact);
            ASSERT_TRUE(cost.ok());
            ASSERT_EQ(static_cast<double>(r->time_ns), cost->time_s / kUnit);

            // The same in seconds, as a user would call it. Decimal seconds are not exact in a
            // double, so where sends become ready at the same instant along different paths the
            // cost model may order the tie differently: close, not always equal.
            algo::CostParams seconds;
            seconds.alpha_s = static_cast<double>(prm.latency_ns) * 1e-9;
            seconds.beta_s_per_byte = 1.0 / static_cast<double>(prm.bandwidth_bps);
            StatusOr<algo::ScheduleCost> cost_s = algo::CostOf(*schedule, seconds);
            ASSERT_TRUE(cost_s.ok());
            EXPECT_NEAR(static_cast<double>(r->time_ns), cost_s->time_s * 1e9,
                        1e-3 * static_cast<double>(r->time_ns) + 1);

            if (algo::FormulaIsExact(spec)) {
              StatusOr<algo::ClosedForm> f = algo::Theory(spec, 0);
              ASSERT_TRUE(f.ok());
              const double want = f->alpha_terms * static_cast<double>(prm.latency_ns) +
                                  f->beta_elems * 4 * ns_per_byte;
              EXPECT_NEAR(static_cast<double>(r->time_ns), want, 0.5);
              ++formula_checked;
            }
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
  EXPECT_GT(formula_checked, 500);
}

// The 2-D and hierarchical allreduce on grids chosen by hand, against their closed form.
TEST(SimExactness, GridAllreduceMatchesClosedForm) {
  struct Case {
    Algorithm algorithm;
    int p;
    int shape;  // grid_rows or local_size
    int64_t steps;
  };
  const Case cases[] = {
      {Algorithm::kTwoD, 16, 4, 12},
      {Algorithm::kTwoD, 16, 2, 2 * 1 + 2 * 7},
      {Algorithm::kTwoD, 12, 3, 2 * 2 + 2 * 3},
      {Algorithm::kHierarchical, 16, 8, 2 * 7 + 2 * 1},
      {Algorithm::kHierarchical, 24, 8, 2 * 7 + 2 * 2},
      {Algorithm::kTwoD, 7, 7, 2 * 6},
  };
  for (const Case& c : cases) {
    CollectiveSpec spec;
    spec.algorithm = c.algorithm;
    spec.world_size = c.p;
    spec.count = 48 * c.p;
    if (c.algorithm == Algorithm::kTwoD) {
      spec.grid_rows = c.shape;
    } else {
      spec.local_size = c.shape;
    }
    SCOPED_TRACE(spec.ToString() + " shape " + std::to_string(c.shape));
    SimOptions o;
    o.topology_options.link = LinkParams{1'000'000'000, 1000};
    StatusOr<SimResult> r = Simulate(spec, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(r->ok);
    EXPECT_EQ(r->steps, c.steps);
    ASSERT_TRUE(algo::FormulaIsExact(spec));
    StatusOr<algo::ClosedForm> f = algo::Theory(spec, 0);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->alpha_terms, static_cast<double>(c.steps));
    EXPECT_EQ(static_cast<double>(r->time_ns), f->alpha_terms * 1000 + f->beta_elems * 4);
  }
}

}  // namespace
}  // namespace gyre::sim
