// gyre-bench --explain's text: every algorithm's model estimate, the measured medians beside
// them, and the model's pick judged against the measured best and against auto.
#include "bench/explain.h"

#include <gtest/gtest.h>

#include "core/algo/estimate.h"

namespace gyre::bench {
namespace {

algo::CollectiveSpec Allreduce(int p, int64_t count) {
  algo::CollectiveSpec s = algo::MakeSpec(algo::Collective::kAllreduce, count, DataType::kFloat32);
  s.world_size = p;
  return s;
}

TEST(ExplainTest, LatencyBoundPrefersFewRoundsBandwidthBoundPrefersRing) {
  algo::CostParams latency;  // messages cost everything
  latency.alpha_s = 1;
  latency.beta_s_per_byte = 0;
  auto small = algo::EstimateAlgorithms(Allreduce(8, 8), latency);
  ASSERT_FALSE(small.empty());
  EXPECT_NE(small.front().algorithm, algo::Algorithm::kRing);  // 2(p-1) rounds is the most
  for (const auto& e : small) {
    if (e.algorithm == algo::Algorithm::kRing) {
      EXPECT_DOUBLE_EQ(e.seconds, 14.0);  // 2(p-1) rounds
    }
    if (e.algorithm == algo::Algorithm::kRecursiveDoubling) {
      EXPECT_DOUBLE_EQ(e.seconds, 3.0);  // log2 p rounds
    }
  }
  algo::CostParams bandwidth;  // bytes cost everything
  bandwidth.alpha_s = 0;
  bandwidth.beta_s_per_byte = 1e-9;
  auto large = algo::EstimateAlgorithms(Allreduce(8, 1 << 20), bandwidth);
  ASSERT_FALSE(large.empty());
  EXPECT_LE(large.front().seconds, large.back().seconds);
  for (const auto& e : large) {
    if (e.algorithm == algo::Algorithm::kDirect) {
      EXPECT_GT(e.seconds, large.front().seconds);  // (p-1)n per rank: never the best here
    }
  }
}

TEST(ExplainTest, TextNamesThePickTheBestAndAuto) {
  algo::CostParams params;
  const algo::CollectiveSpec spec = Allreduce(4, 1024);
  const auto est = algo::EstimateAlgorithms(spec, params);
  ASSERT_FALSE(est.empty());
  const std::string pick = algo::AlgorithmName(est.front().algorithm);
  std::map<std::string, double> measured = {{pick, 200.0}, {"ring", 100.0}, {"auto", 150.0}};
  const std::string text = Explain(spec, params, measured, "ring");
  EXPECT_NE(text.find("# explain 4096 B  " + pick), std::string::npos) << text;
  EXPECT_NE(text.find("measured      200.0 us"), std::string::npos) << text;
  if (pick != "ring") {
    EXPECT_NE(text.find("model picks " + pick + " (measured 2.00x the best, ring)"),
              std::string::npos)
        << text;
  }
  EXPECT_NE(text.find("auto ran ring (1.50x the best)"), std::string::npos) << text;
}

TEST(ExplainTest, ModelTextShowsEveryCandidateItsTermsAndWhyThePickWins) {
  const algo::MachineModel model = algo::DefaultMachineModel();
  const algo::CollectiveSpec spec = Allreduce(4, 16384);
  const auto est = algo::RankCandidates(spec, model);
  ASSERT_GE(est.size(), 2u);
  const std::string pick = algo::AlgorithmName(est.front().algorithm);
  const std::string text = Explain(spec, model, {{pick, 100.0}, {"auto", 101.0}}, pick);
  for (const auto& e : est) {
    EXPECT_NE(text.find(std::string("  ") + algo::AlgorithmName(e.algorithm) + " "),
              std::string::npos)
        << text;
  }
  EXPECT_NE(text.find("(max(walk "), std::string::npos) << text;
  EXPECT_NE(text.find("# explain why: " + pick + " has the lowest estimate"), std::string::npos)
      << text;
  EXPECT_NE(text.find("model picks " + pick + " (measured 1.00x the best, " + pick + ")"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("auto ran " + pick + " (1.01x the best)"), std::string::npos) << text;
}

}  // namespace
}  // namespace gyre::bench
