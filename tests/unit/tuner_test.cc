// OnlineTuner's bookkeeping: which candidates a bucket tries, in what order, which trial times
// count, what the ranks' sums decide, and that every rank reaches the agreement at the same
// call whatever happened to its trials.
#include "core/comm/tuner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/algo/model_select.h"

namespace gyre {
namespace {

using algo::Algorithm;
using Candidates = std::vector<OnlineTuner::Candidate>;

algo::CollectiveSpec Spec(int64_t count, Algorithm model_pick, int p = 4) {
  algo::CollectiveSpec s =
      algo::MakeSpec(algo::Collective::kBroadcast, count, DataType::kFloat32, ReduceOp::kSum, 0);
  s.world_size = p;
  s.algorithm = model_pick;
  return s;
}

const Candidates kFour = {{Algorithm::kChain, 1.0e-3},
                          {Algorithm::kBinomial, 1.2e-3},
                          {Algorithm::kHierarchical, 1.4e-3},
                          {Algorithm::kDirect, 1.45e-3}};
const Candidates kTwo = {{Algorithm::kChain, 1.0e-3}, {Algorithm::kBinomial, 1.2e-3}};

// Runs every trial call of the bucket of `spec`, candidate c taking ns[c] (the warm round
// takes far longer and must not count), failing call `fail_at` if set; returns what this
// rank contributes to the agreement.
std::vector<int64_t> RunTrials(OnlineTuner& t, const algo::CollectiveSpec& spec,
                               const Candidates& offered, const std::vector<int64_t>& ns,
                               std::vector<int>* trials = nullptr, int fail_at = -1) {
  const int k = static_cast<int>(ns.size());
  for (int call = 0; call < OnlineTuner::kTrialCalls; ++call) {
    OnlineTuner::Plan plan = t.Next(spec, [&] { return offered; });
    EXPECT_TRUE(plan.agree.empty()) << "call " << call;
    EXPECT_GE(plan.trial, 0) << "call " << call;
    if (plan.trial < 0) return {};
    EXPECT_EQ(plan.algorithm, offered[static_cast<size_t>(plan.trial)].algorithm);
    if (trials) trials->push_back(plan.trial);
    const int round = call / k;
    // Timed calls vary around ns[c] (+0, +5, -5, +5 ...): the median is ns[c].
    const int64_t jitter = round == 1 ? 0 : (round % 2 == 0 ? 5 : -5);
    const int64_t took = round < OnlineTuner::kWarmRounds
                             ? 1000000000
                             : ns[static_cast<size_t>(plan.trial)] + jitter;
    t.Record(spec, plan.trial, std::chrono::nanoseconds(took), call != fail_at);
  }
  OnlineTuner::Plan plan = t.Next(spec, [&] { return offered; });
  EXPECT_EQ(plan.trial, -1);
  EXPECT_EQ(plan.agree.size(), static_cast<size_t>(OnlineTuner::kAgreeLength));
  return plan.agree;
}

// The agreement's sums when every one of `p` ranks contributed `mine`.
std::vector<int64_t> Times(const std::vector<int64_t>& mine, int p) {
  std::vector<int64_t> out = mine;
  for (int64_t& v : out) v *= p;
  return out;
}

// The agreement's sums of two ranks.
std::vector<int64_t> Add(const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
  EXPECT_EQ(x.size(), y.size());
  std::vector<int64_t> out(std::min(x.size(), y.size()));
  for (size_t i = 0; i < out.size(); ++i) out[i] = x[i] + y[i];
  return out;
}

TEST(OnlineTunerTest, TriesTheCloseCandidatesInRotatingTurnsThenKeepsTheAgreedFastest) {
  OnlineTuner t;
  const auto spec = Spec(1 << 18, Algorithm::kChain);
  std::vector<int> trials;
  // kDirect is within 1.5x too, but only three are tried.
  const std::vector<int64_t> mine = RunTrials(t, spec, kFour, {900, 700, 800}, &trials);
  // Four rounds of three, each round one candidate later.
  EXPECT_EQ(trials, (std::vector<int>{0, 1, 2, 1, 2, 0, 2, 0, 1, 0, 1, 2}));
  ASSERT_EQ(mine.size(), 6u);
  EXPECT_EQ(mine[0], 900);
  EXPECT_EQ(mine[1], 700);
  EXPECT_EQ(mine[2], 800);
  EXPECT_EQ(mine[3], 0) << "no trial failed";
  EXPECT_GT(mine[4], 0);
  EXPECT_EQ(mine[5], mine[4] * mine[4]);
  EXPECT_EQ(t.Describe(spec), "tuning: 12 of 12 trial calls made");

  // The other ranks saw otherwise: the sums decide, not this rank's medians.
  std::vector<int64_t> sums = Times(mine, 4);
  sums[0] = 3000;
  sums[1] = 3500;
  sums[2] = 2900;
  t.Agreed(spec, sums);
  for (int i = 0; i < 3; ++i) {
    OnlineTuner::Plan plan = t.Next(spec, [] { return kFour; });
    EXPECT_EQ(plan.algorithm, Algorithm::kHierarchical);
    EXPECT_EQ(plan.trial, -1);
    EXPECT_TRUE(plan.agree.empty());
  }
  EXPECT_EQ(t.Describe(spec),
            "tuned: hierarchical 2.9 us, chain 3.0 us, binomial 3.5 us (sums over 4 ranks of "
            "each rank's median trial)");
}

TEST(OnlineTunerTest, OneScheduleUnderTwoNamesIsTriedOnce) {
  // Binomial and hierarchical with one shape (hierarchical on one host of 4 ranks is the
  // binomial tree): the third slot goes to direct, the next distinct candidate.
  const Candidates offered = {{Algorithm::kChain, 1.0e-3, 11},
                              {Algorithm::kBinomial, 1.2e-3, 22},
                              {Algorithm::kHierarchical, 1.2e-3, 22},
                              {Algorithm::kDirect, 1.45e-3, 33}};
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  std::set<Algorithm> ran;
  for (int call = 0; call < OnlineTuner::kTrialCalls; ++call) {
    OnlineTuner::Plan plan = t.Next(spec, [&] { return offered; });
    ASSERT_GE(plan.trial, 0);
    ran.insert(plan.algorithm);
    t.Record(spec, plan.trial, std::chrono::microseconds(100), true);
  }
  EXPECT_EQ(ran,
            (std::set<Algorithm>{Algorithm::kChain, Algorithm::kBinomial, Algorithm::kDirect}));

  // Without a shape (0), or with the same shape but another estimate, both names are tried.
  for (const Candidates& both : {Candidates{{Algorithm::kChain, 1.0e-3},
                                            {Algorithm::kBinomial, 1.2e-3},
                                            {Algorithm::kHierarchical, 1.2e-3}},
                                 Candidates{{Algorithm::kChain, 1.0e-3, 11},
                                            {Algorithm::kBinomial, 1.2e-3, 22},
                                            {Algorithm::kHierarchical, 1.3e-3, 22}}}) {
    OnlineTuner u;
    std::set<Algorithm> tried;
    for (int call = 0; call < 3; ++call) {
      OnlineTuner::Plan plan = u.Next(spec, [&] { return both; });
      tried.insert(plan.algorithm);
      u.Record(spec, plan.trial, std::chrono::microseconds(100), true);
    }
    EXPECT_TRUE(tried.count(Algorithm::kHierarchical));
  }
}

TEST(OnlineTunerTest, TwoCandidatesShareTheSameNumberOfTrialCalls) {
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  std::vector<int> trials;
  const std::vector<int64_t> mine = RunTrials(t, spec, kTwo, {2000000, 1500000}, &trials);
  EXPECT_EQ(trials, (std::vector<int>{0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0}));
  ASSERT_EQ(mine.size(), 6u);
  EXPECT_EQ(mine[0], 2000000);
  EXPECT_EQ(mine[1], 1500000);
  EXPECT_EQ(mine[2], 0) << "an unused slot";
  t.Agreed(spec, Times(mine, 4));
  EXPECT_EQ(t.Next(spec, [] { return kTwo; }).algorithm, Algorithm::kBinomial);
  EXPECT_EQ(t.Describe(spec),
            "tuned: binomial 6.00 ms, chain 8.00 ms (sums over 4 ranks of each rank's median "
            "trial)");
}

TEST(OnlineTunerTest, BucketsAreTheModelsQuarterOctaves) {
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  t.Agreed(spec, Times(RunTrials(t, spec, kFour, {10, 20, 30}), 4));
  // A count of the same bucket runs the decision; one of the next bucket starts trials.
  const int64_t same = (1 << 20) + 1000;
  const int64_t next = (1 << 20) + (1 << 18);
  ASSERT_EQ(algo::ModelSelector::BucketCount(same), 1 << 20);
  ASSERT_NE(algo::ModelSelector::BucketCount(next), 1 << 20);
  EXPECT_EQ(t.Next(Spec(same, Algorithm::kChain), [] { return kFour; }).trial, -1);
  EXPECT_EQ(t.Next(Spec(next, Algorithm::kChain), [] { return kFour; }).trial, 0);
  // So does another world size.
  EXPECT_EQ(t.Next(Spec(1 << 20, Algorithm::kChain, 8), [] { return kFour; }).trial, 0);
}

TEST(OnlineTunerTest, TiesKeepTheModelsOrder) {
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  t.Agreed(spec, Times(RunTrials(t, spec, kFour, {5, 5, 5}), 4));
  EXPECT_EQ(t.Next(spec, [] { return kFour; }).algorithm, Algorithm::kChain);
}

TEST(OnlineTunerTest, WithoutACloseRivalTheModelsChoiceStillAgreesAtTheSameCall) {
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  // The runner-up is more than 1.5x behind: every trial call runs the model's choice.
  const Candidates far = {{Algorithm::kChain, 1.0}, {Algorithm::kBinomial, 1.6}};
  std::vector<int> trials;
  const std::vector<int64_t> mine = RunTrials(t, spec, far, {7}, &trials);
  EXPECT_EQ(trials, std::vector<int>(OnlineTuner::kTrialCalls, 0));
  t.Agreed(spec, Times(mine, 4));
  EXPECT_EQ(t.Next(spec, [&] { return far; }).algorithm, Algorithm::kChain);
  EXPECT_EQ(t.Describe(spec),
            "untuned: chain (the model's choice): no candidate within 1.5x of it in the model");
  // Nor when the ranking does not start with the caller's choice (it is the model's).
  OnlineTuner u;
  for (int i = 0; i < 3; ++i) {
    OnlineTuner::Plan plan = u.Next(Spec(1 << 20, Algorithm::kBinomial), [] { return kFour; });
    EXPECT_EQ(plan.algorithm, Algorithm::kBinomial);
    EXPECT_EQ(plan.trial, 0);
    u.Record(Spec(1 << 20, Algorithm::kBinomial), 0, std::chrono::microseconds(1), true);
  }
}

TEST(OnlineTunerTest, AFailedTrialOnOneRankKeepsTheModelsChoiceOnEveryRank) {
  // Rank A's fifth trial failed, rank B's did not: both still agree at call 12.
  OnlineTuner a, b;
  const auto spec = Spec(1 << 22, Algorithm::kChain, 2);
  const std::vector<int64_t> from_a = RunTrials(a, spec, kFour, {100, 1, 1}, nullptr, 4);
  const std::vector<int64_t> from_b = RunTrials(b, spec, kFour, {100, 1, 1});
  ASSERT_EQ(from_a.size(), from_b.size());
  EXPECT_EQ(from_a[3], 1);
  EXPECT_EQ(from_b[3], 0);
  a.Agreed(spec, Add(from_a, from_b));
  b.Agreed(spec, Add(from_a, from_b));
  EXPECT_EQ(a.Next(spec, [] { return kFour; }).algorithm, Algorithm::kChain);
  EXPECT_EQ(b.Next(spec, [] { return kFour; }).algorithm, Algorithm::kChain);
  EXPECT_EQ(b.Describe(spec), "untuned: chain (the model's choice): a trial failed on 1 rank(s)");
  // A late Record or Agreed for a decided bucket changes nothing.
  b.Record(spec, 1, std::chrono::microseconds(1), true);
  b.Agreed(spec, {9, 1, 1, 0, 1, 1});
  EXPECT_EQ(b.Next(spec, [] { return kFour; }).algorithm, Algorithm::kChain);
}

TEST(OnlineTunerTest, RanksWhoseModelsOfferDifferentCandidatesKeepTheModelsChoice) {
  // Calibrated apart, rank A's model offers three candidates and rank B's two: both reach
  // the agreement at the same call, see the lists differ, and keep chain.
  OnlineTuner a, b;
  const auto spec = Spec(1 << 22, Algorithm::kChain, 2);
  const std::vector<int64_t> from_a = RunTrials(a, spec, kFour, {100, 1, 50});
  const std::vector<int64_t> from_b = RunTrials(b, spec, kTwo, {100, 1});
  a.Agreed(spec, Add(from_a, from_b));
  b.Agreed(spec, Add(from_a, from_b));
  EXPECT_EQ(a.Next(spec, [] { return kFour; }).algorithm, Algorithm::kChain);
  EXPECT_EQ(b.Next(spec, [] { return kTwo; }).algorithm, Algorithm::kChain);
  EXPECT_EQ(a.Describe(spec),
            "untuned: chain (the model's choice): the ranks' models offered different "
            "candidates");
}

TEST(OnlineTunerTest, AFailedAgreementIsNotRetried) {
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  RunTrials(t, spec, kFour, {3, 2, 1});
  t.AgreementFailed(spec);
  OnlineTuner::Plan plan = t.Next(spec, [] { return kFour; });
  EXPECT_EQ(plan.algorithm, Algorithm::kChain);
  EXPECT_TRUE(plan.agree.empty());
  EXPECT_EQ(t.Describe(spec), "untuned: chain (the model's choice): the agreement failed");
}

TEST(OnlineTunerTest, AgreedSumsOfTheWrongLengthKeepTheModelsChoice) {
  OnlineTuner t;
  const auto spec = Spec(1 << 20, Algorithm::kChain);
  RunTrials(t, spec, kFour, {3, 2, 1});
  t.Agreed(spec, {5, 1});
  EXPECT_EQ(t.Next(spec, [] { return kFour; }).algorithm, Algorithm::kChain);
}

TEST(OnlineTunerTest, DescribesAnUnseenBucketAsEmpty) {
  OnlineTuner t;
  EXPECT_EQ(t.Describe(Spec(1, Algorithm::kChain)), "");
}

// A failure gives up every bucket still in its trials (the model's choice, no agreement),
// and leaves a bucket already decided, and a bucket first seen later, as they would be.
TEST(OnlineTunerTest, AbandonedTrialsKeepTheModelsChoiceAndLeaveDecidedBucketsAlone) {
  OnlineTuner t;
  const algo::CollectiveSpec decided = Spec(1 << 20, Algorithm::kChain);
  const std::vector<int64_t> mine = RunTrials(t, decided, kTwo, {900, 500});
  t.Agreed(decided, Times(mine, 4));
  EXPECT_EQ(t.Next(decided, [] { return kTwo; }).algorithm, Algorithm::kBinomial);

  const algo::CollectiveSpec trying = Spec(16 << 20, Algorithm::kChain);
  OnlineTuner::Plan first = t.Next(trying, [] { return kTwo; });
  ASSERT_GE(first.trial, 0);
  t.Record(trying, first.trial, std::chrono::nanoseconds(1000), true);
  t.AbandonTrials("seq=9 failed before its trials ended");
  for (int call = 0; call < OnlineTuner::kTrialCalls + 2; ++call) {
    OnlineTuner::Plan plan = t.Next(trying, [] { return kTwo; });
    EXPECT_EQ(plan.trial, -1);
    EXPECT_TRUE(plan.agree.empty());
    EXPECT_EQ(plan.algorithm, Algorithm::kChain);
  }
  EXPECT_EQ(t.Describe(trying),
            "untuned: chain (the model's choice): seq=9 failed before its trials ended");
  EXPECT_EQ(t.Next(decided, [] { return kTwo; }).algorithm, Algorithm::kBinomial);

  const algo::CollectiveSpec later = Spec(4 << 20, Algorithm::kChain);
  EXPECT_GE(t.Next(later, [] { return kTwo; }).trial, 0);
}

}  // namespace
}  // namespace gyre
