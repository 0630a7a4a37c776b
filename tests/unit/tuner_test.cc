// OnlineTuner's bookkeeping: which candidates a bucket tries, in what order, which trial times
// count, and what the ranks' sums decide.
#include "core/comm/tuner.h"

#include <gtest/gtest.h>

#include "core/algo/model_select.h"

namespace gyre {
namespace {

using algo::Algorithm;
using Candidates = std::vector<OnlineTuner::Candidate>;

algo::CollectiveSpec Spec(int64_t count, Algorithm model_pick) {
  algo::CollectiveSpec s =
      algo::MakeSpec(algo::Collective::kBroadcast, count, DataType::kFloat32, ReduceOp::kSum, 0);
  s.world_size = 4;
  s.algorithm = model_pick;
  return s;
}

const Candidates kThree = {{Algorithm::kChain, 1.0e-3},
                           {Algorithm::kBinomial, 1.2e-3},
                           {Algorithm::kHierarchical, 1.4e-3},
                           {Algorithm::kDirect, 1.45e-3}};

// Runs every trial of the bucket of `spec`, each candidate taking `ns[c]` (the warm calls take
// far longer, and must not count), and returns the medians the ranks are to add up.
std::vector<int64_t> RunTrials(OnlineTuner& t, const algo::CollectiveSpec& spec,
                               const std::vector<int64_t>& ns, std::vector<Algorithm>* ran) {
  const int k = static_cast<int>(ns.size());
  for (int call = 0; call < k * (OnlineTuner::kWarmCalls + OnlineTuner::kTimedCalls); ++call) {
    OnlineTuner::Plan plan = t.Next(spec, [] { return kThree; });
    EXPECT_TRUE(plan.agree.empty()) << "call " << call;
    EXPECT_EQ(plan.trial, call % k) << "call " << call;
    ran->push_back(plan.algorithm);
    const bool warm = call / k < OnlineTuner::kWarmCalls;
    // Timed calls vary around ns[c] (+0, +5, -5 ...): the median is ns[c].
    const int64_t jitter = (call / k) % 2 == 0 ? 5 : -5;
    const int64_t took =
        warm ? 1000000000 : ns[static_cast<size_t>(plan.trial)] + (call / k == 1 ? 0 : jitter);
    t.Record(spec, plan.trial, std::chrono::nanoseconds(took), true);
  }
  OnlineTuner::Plan plan = t.Next(spec, [] { return kThree; });
  EXPECT_EQ(plan.trial, -1);
  return plan.agree;
}

TEST(OnlineTunerTest, TriesTheCloseCandidatesInTurnThenKeepsTheAgreedFastest) {
  OnlineTuner t;
  const auto spec = Spec(1 << 18, Algorithm::kChain);
  std::vector<Algorithm> ran;
  // kDirect is within 1.5x too, but only three are tried.
  const std::vector<int64_t> medians = RunTrials(t, spec, {900, 700, 800}, &ran);
  ASSERT_EQ(ran.size(), 12u);
  for (size_t i = 0; i < ran.size(); ++i) {
    EXPECT_EQ(ran[i], kThree[i % 3].algorithm) << "call " << i;
  }
  EXPECT_EQ(medians, (std::vector<int64_t>{900, 700, 800}));
  EXPECT_EQ(t.Describe(spec), "tuning: 12 of 12 trial calls made");

  // The other ranks saw otherwise: the sums decide, not this rank's medians.
  t.Agreed(spec, {3000, 3500, 2900});
  for (int i = 0; i < 3; ++i) {
    OnlineTuner::Plan plan = t.Next(spec, [] { return kThree; });
    EXPECT_EQ(plan.algorithm, Algorithm::kHierarchical);
    EXPECT_EQ(plan.trial, -1);
    EXPECT_TRUE(plan.agree.empty());
  }
  EXPECT_EQ(t.Describe(spec),
            "tuned: hierarchical 2.9 us, chain 3.0 us, binomial 3.5 us (sums over 4 ranks of "
            "each rank's median trial)");
}

TEST(OnlineTunerTest, BucketsAreTheModelsQuarterOctaves) {
  OnlineTuner t;
  std::vector<Algorithm> ran;
  RunTrials(t, Spec(1 << 20, Algorithm::kChain), {10, 20, 30}, &ran);
  t.Agreed(Spec(1 << 20, Algorithm::kChain), {40, 50, 60});
  // A count of the same bucket runs the decision; one of the next bucket starts trials.
  const int64_t same = (1 << 20) + 1000;
  const int64_t next = (1 << 20) + (1 << 18);
  ASSERT_EQ(algo::ModelSelector::BucketCount(same), 1 << 20);
  ASSERT_NE(algo::ModelSelector::BucketCount(next), 1 << 20);
  EXPECT_EQ(t.Next(Spec(same, Algorithm::kChain), [] { return kThree; }).trial, -1);
  EXPECT_EQ(t.Next(Spec(next, Algorithm::kChain), [] { return kThree; }).trial, 0);
  // So does another world size or collective.
  auto other = Spec(1 << 20, Algorithm::kChain);
  other.world_size = 8;
  EXPECT_EQ(t.Next(other, [] { return kThree; }).trial, 0);
}

TEST(OnlineTunerTest, TiesKeepTheModelsOrder) {
  OnlineTuner t;
  const auto spec = Spec(4096, Algorithm::kChain);
  std::vector<Algorithm> ran;
  RunTrials(t, spec, {5, 5, 5}, &ran);
  t.Agreed(spec, {100, 100, 100});
  EXPECT_EQ(t.Next(spec, [] { return kThree; }).algorithm, Algorithm::kChain);
}

TEST(OnlineTunerTest, NoTrialsWithoutACloseRival) {
  OnlineTuner t;
  const auto spec = Spec(64, Algorithm::kChain);
  // The runner-up is more than 1.5x behind.
  const Candidates far = {{Algorithm::kChain, 1.0}, {Algorithm::kBinomial, 1.6}};
  for (int i = 0; i < 5; ++i) {
    OnlineTuner::Plan plan = t.Next(spec, [&] { return far; });
    EXPECT_EQ(plan.algorithm, Algorithm::kChain);
    EXPECT_EQ(plan.trial, -1);
    EXPECT_TRUE(plan.agree.empty());
  }
  EXPECT_EQ(t.Describe(spec), "untuned: chain has no close rival in the model");
  // Nor when the ranking does not start with the caller's choice (it is the model's).
  OnlineTuner u;
  EXPECT_EQ(u.Next(Spec(64, Algorithm::kBinomial), [] { return kThree; }).trial, -1);
  EXPECT_EQ(u.Next(Spec(64, Algorithm::kBinomial), [] { return kThree; }).algorithm,
            Algorithm::kBinomial);
}

TEST(OnlineTunerTest, AFailedTrialEndsTheBucketsTuningAtTheModelsChoice) {
  OnlineTuner t;
  const auto spec = Spec(1 << 16, Algorithm::kChain);
  OnlineTuner::Plan plan = t.Next(spec, [] { return kThree; });
  t.Record(spec, plan.trial, std::chrono::microseconds(10), true);
  plan = t.Next(spec, [] { return kThree; });
  ASSERT_EQ(plan.algorithm, Algorithm::kBinomial);
  t.Record(spec, plan.trial, std::chrono::microseconds(10), false);
  plan = t.Next(spec, [] { return kThree; });
  EXPECT_EQ(plan.algorithm, Algorithm::kChain);
  EXPECT_EQ(plan.trial, -1);
  EXPECT_TRUE(plan.agree.empty());
  EXPECT_EQ(t.Describe(spec), "untuned: a trial failed, chain (the model's choice)");
  // A late Record or Agreed for a decided bucket changes nothing.
  t.Record(spec, 1, std::chrono::microseconds(1), true);
  t.Agreed(spec, {9, 1, 1});
  EXPECT_EQ(t.Next(spec, [] { return kThree; }).algorithm, Algorithm::kChain);
}

TEST(OnlineTunerTest, AgreedSumsOfTheWrongLengthKeepTheModelsChoice) {
  OnlineTuner t;
  const auto spec = Spec(1 << 12, Algorithm::kChain);
  std::vector<Algorithm> ran;
  RunTrials(t, spec, {3, 2, 1}, &ran);
  t.Agreed(spec, {5, 1});
  EXPECT_EQ(t.Next(spec, [] { return kThree; }).algorithm, Algorithm::kChain);
}

TEST(OnlineTunerTest, DescribesAnUnseenBucketAsEmpty) {
  OnlineTuner t;
  EXPECT_EQ(t.Describe(Spec(1, Algorithm::kChain)), "");
}

}  // namespace
}  // namespace gyre
