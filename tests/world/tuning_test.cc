// Online tuning (CommOptions::tune) across real communicators: every rank runs the same trial
// and the same decision, the results stay exact, the agreement is one extra operation, and
// the candidate that is faster on the wire wins even where the model ranks it second.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "core/algo/model_select.h"
#include "core/transport/faulty.h"
#include "core/transport/loopback.h"
#include "tests/world/world.h"

namespace gyre::testing {
namespace {

using algo::Algorithm;
using algo::Collective;

constexpr int kP = 4;

CommOptions Tuned(bool tune = true) {
  CommOptions o;
  o.tune = tune;
  o.timeout = Seconds(10);
  return o;
}

// The model's candidates as the tuner sees them: fastest first, within its ratio and count.
std::vector<algo::Estimate> CloseCandidates(Collective c, int64_t count, DataType dtype) {
  algo::CollectiveSpec s =
      algo::MakeSpec(c, algo::ModelSelector::BucketCount(count), dtype, ReduceOp::kSum, 0);
  s.world_size = kP;
  std::vector<algo::Estimate> all = algo::RankCandidates(s, algo::DefaultMachineModel());
  std::vector<algo::Estimate> close;
  for (const algo::Estimate& e : all) {
    if (static_cast<int>(close.size()) == OnlineTuner::kMaxCandidates) break;
    if (!close.empty() && e.seconds > close.front().seconds * OnlineTuner::kMaxEstimateRatio) break;
    // One schedule under two names (every figure equal) is tried once.
    const bool seen = std::any_of(close.begin(), close.end(), [&](const algo::Estimate& t) {
      return t.seconds == e.seconds && t.walk_s == e.walk_s && t.overhead_s == e.overhead_s &&
             t.throughput_s == e.throughput_s && t.rounds == e.rounds && t.max_msgs == e.max_msgs &&
             t.max_bytes == e.max_bytes && t.max_reduced_bytes == e.max_reduced_bytes;
    });
    if (!seen) close.push_back(e);
  }
  return close;
}

// The smallest tuned int32 allreduce count (doubling from 1 MiB) at which the model has a
// close rival, with its candidates in *close (fewer than two if there is none up to 16 MiB).
int64_t AllreduceCountWithRivals(std::vector<algo::Estimate>* close) {
  int64_t count = 0;
  close->clear();
  for (int64_t c = OnlineTuner::kMinBytes / 4; c <= (int64_t{1} << 22) && close->size() < 2;
       c *= 2) {
    *close = CloseCandidates(Collective::kAllreduce, c, DataType::kInt32);
    count = c;
  }
  return count;
}

constexpr int kTrials = OnlineTuner::kTrialCalls;

// The candidate a trial call runs: the candidates in turn, each round one later.
int TrialOf(int call, int k) { return (call % k + call / k) % k; }

// The tests compare with the built-in model; a calibration in the environment would change
// the communicators' candidates.
class TuningTest : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("GYRE_CALIBRATION"); }
};

TEST_F(TuningTest, EveryRankTriesTheSameCandidatesThenRunsOneAlgorithmWithExactResults) {
  // An int32 allreduce size (from the smallest tuned one) where the model has a close rival.
  std::vector<algo::Estimate> close;
  const int64_t count = AllreduceCountWithRivals(&close);
  ASSERT_GE(close.size(), 2u) << "the built-in model has no close allreduce rivals at 4 ranks";
  const int k = static_cast<int>(close.size());
  const int calls = kTrials + 6;

  auto world = MakeWorld(LoopbackFactory(), kP, Tuned());
  ASSERT_TRUE(world.ok()) << world.status();
  std::vector<std::vector<Algorithm>> ran(kP);
  auto statuses = RunOnRanks(kP, [&](int r) -> Status {
    std::vector<int32_t> in(static_cast<size_t>(count)), out(static_cast<size_t>(count));
    for (int call = 0; call < calls; ++call) {
      for (int64_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>(r * 100003 + i * 7 + call);
      GYRE_RETURN_IF_ERROR(
          (*world)[r]->Allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum));
      ran[r].push_back((*world)[r]->last().spec.algorithm);
      for (int64_t i = 0; i < count; ++i) {
        const int64_t want = int64_t{100003} * (kP * (kP - 1) / 2) + kP * (i * 7 + call);
        if (out[i] != static_cast<int32_t>(want)) {
          return InternalError("rank " + std::to_string(r) + " call " + std::to_string(call) +
                               " element " + std::to_string(i) + " is wrong");
        }
      }
    }
    return Status::Ok();
  });
  for (int r = 0; r < kP; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r];
  for (int r = 1; r < kP; ++r) EXPECT_EQ(ran[r], ran[0]) << "rank " << r << " ran otherwise";
  // The trials take the model's close candidates in turn, the model's choice first.
  for (int call = 0; call < kTrials; ++call) {
    EXPECT_EQ(ran[0][call], close[TrialOf(call, k)].algorithm) << "trial call " << call;
  }
  // Then one of them, from the first decided call on.
  const Algorithm kept = ran[0][kTrials];
  std::set<Algorithm> tried;
  for (const auto& e : close) tried.insert(e.algorithm);
  EXPECT_TRUE(tried.count(kept)) << algo::AlgorithmName(kept);
  for (int call = kTrials; call < calls; ++call) EXPECT_EQ(ran[0][call], kept);
  // The agreement was one more operation, on every rank.
  for (int r = 0; r < kP; ++r) EXPECT_EQ((*world)[r]->next_seq(), uint64_t(calls) + 2);
}

TEST_F(TuningTest, KeepsTheCandidateWithFewerHopsWhenEveryMessageIsSlow) {
  // A broadcast size where the model's choice takes more rounds than a close rival: with
  // every message held 50 ms and every call started together (a barrier first), each round
  // costs 50 ms, and the rival is faster by that much per round, whatever the model says.
  // (At 20 ms a trial slowed by a loaded machine could lose that margin: it failed once in
  // a full run.)
  int64_t count = 0;
  std::vector<algo::Estimate> close;
  int64_t fewest = 0;
  for (int64_t c = OnlineTuner::kMinBytes; c <= (int64_t{1} << 24); c *= 2) {
    close = CloseCandidates(Collective::kBroadcast, c, DataType::kUint8);
    if (close.size() < 2) continue;
    fewest = close.front().rounds;
    for (const auto& e : close) fewest = std::min(fewest, e.rounds);
    if (fewest < close.front().rounds) {
      count = c;
      break;
    }
  }
  ASSERT_GT(count, 0) << "the built-in model always picks the fewest rounds for broadcast";
  const int calls = kTrials + 3;

  FaultPlan slow;
  slow.delay = Millis(50);
  auto transports = LoopbackHub::CreateWorld(kP);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) {
    comms.push_back(std::make_unique<Communicator>(
        std::make_unique<FaultyTransport>(std::move(t), slow), Tuned()));
  }
  std::vector<Algorithm> kept(kP);
  auto statuses = RunOnRanks(kP, [&](int r) -> Status {
    std::vector<uint8_t> buf(static_cast<size_t>(count));
    for (int call = 0; call < calls; ++call) {
      for (int64_t i = 0; i < count; ++i) buf[i] = r == 1 ? static_cast<uint8_t>(i * 13 + call) : 0;
      GYRE_RETURN_IF_ERROR(comms[r]->Barrier());  // 0 bytes: never tuned
      GYRE_RETURN_IF_ERROR(comms[r]->Broadcast(buf.data(), buf.data(), count, DataType::kUint8, 1));
      for (int64_t i = 0; i < count; ++i) {
        if (buf[i] != static_cast<uint8_t>(i * 13 + call)) return InternalError("wrong byte");
      }
    }
    kept[r] = comms[r]->last().spec.algorithm;
    return Status::Ok();
  });
  for (int r = 0; r < kP; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r];
  for (int r = 1; r < kP; ++r) EXPECT_EQ(kept[r], kept[0]);
  int64_t kept_rounds = -1;
  for (const auto& e : close) {
    if (e.algorithm == kept[0]) kept_rounds = e.rounds;
  }
  std::printf(
      "broadcast of %lld B at %d ranks, 50 ms per message: the model's %s (%lld rounds), "
      "kept %s (%lld rounds)\n",
      static_cast<long long>(count), kP, algo::AlgorithmName(close.front().algorithm),
      static_cast<long long>(close.front().rounds), algo::AlgorithmName(kept[0]),
      static_cast<long long>(kept_rounds));
  EXPECT_EQ(kept_rounds, fewest) << "kept " << algo::AlgorithmName(kept[0]) << " over the model's "
                                 << algo::AlgorithmName(close.front().algorithm);
  EXPECT_NE(kept[0], close.front().algorithm);
}

TEST_F(TuningTest, AFailedTrialCallKeepsTheModelsChoiceWithTheSequenceAligned) {
  // A trial call refused before it runs (a null output buffer, on every rank) gives the
  // trials up on every rank at that call: each keeps the model's choice from the next call
  // on, and none runs an agreement (one rank's refusal may come before its count is known,
  // which would leave its trials a call behind the others').
  std::vector<algo::Estimate> close;
  const int64_t count = AllreduceCountWithRivals(&close);
  ASSERT_GE(close.size(), 2u);
  auto world = MakeWorld(LoopbackFactory(), kP, Tuned());
  ASSERT_TRUE(world.ok());
  const int calls = kTrials + 3;
  auto statuses = RunOnRanks(kP, [&](int r) -> Status {
    std::vector<int32_t> in(static_cast<size_t>(count), r), out(static_cast<size_t>(count));
    for (int call = 0; call < calls; ++call) {
      const bool refused = call == 1;
      Status s = (*world)[r]->Allreduce(in.data(), refused ? nullptr : out.data(), count,
                                        DataType::kInt32, ReduceOp::kSum);
      if (refused) {
        if (s.ok() || s.message().find("output buffer is null") == std::string::npos) {
          return InternalError("the null buffer was not refused: " + s.ToString());
        }
        continue;
      }
      GYRE_RETURN_IF_ERROR(s);
      if (call > 1 && (*world)[r]->last().spec.algorithm != close.front().algorithm) {
        return InternalError(std::string("kept ") +
                             algo::AlgorithmName((*world)[r]->last().spec.algorithm));
      }
      for (int32_t v : out) {
        if (v != kP * (kP - 1) / 2) return InternalError("wrong result");
      }
    }
    // One sequence number per call, and none for an agreement.
    if ((*world)[r]->next_seq() != uint64_t(calls) + 1) {
      return InternalError("next_seq " + std::to_string((*world)[r]->next_seq()));
    }
    return Status::Ok();
  });
  for (int r = 0; r < kP; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
}

TEST_F(TuningTest, SmallCallsAreNotTuned) {
  auto world = MakeWorld(LoopbackFactory(), kP, Tuned());
  ASSERT_TRUE(world.ok());
  const int64_t count = OnlineTuner::kMinBytes / 4 - 1;  // one float short
  // Not for want of rivals: the model has close ones there.
  ASSERT_GE(CloseCandidates(Collective::kAllreduce, count, DataType::kFloat32).size(), 2u);
  auto statuses = RunOnRanks(kP, [&](int r) -> Status {
    std::vector<float> in(static_cast<size_t>(count), 1.0f), out(static_cast<size_t>(count));
    std::set<Algorithm> ran;
    for (int call = 0; call < kTrials + 2; ++call) {
      GYRE_RETURN_IF_ERROR(
          (*world)[r]->Allreduce(in.data(), out.data(), count, DataType::kFloat32, ReduceOp::kSum));
      ran.insert((*world)[r]->last().spec.algorithm);
    }
    if (ran.size() != 1) return InternalError(std::to_string(ran.size()) + " algorithms ran");
    if ((*world)[r]->next_seq() != uint64_t(kTrials + 2) + 1) {
      return InternalError("an agreement ran");
    }
    return Status::Ok();
  });
  for (int r = 0; r < kP; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
}

TEST_F(TuningTest, ForcedAndCanonicalCallsAreNotTuned) {
  auto world = MakeWorld(LoopbackFactory(), kP, Tuned());
  ASSERT_TRUE(world.ok());
  auto statuses = RunOnRanks(kP, [&](int r) -> Status {
    const int64_t n = OnlineTuner::kMinBytes / 4;
    std::vector<float> in(static_cast<size_t>(n), 1.0f), out(static_cast<size_t>(n));
    for (int call = 0; call < kTrials; ++call) {
      CallOptions forced;
      forced.algorithm = Algorithm::kRing;
      GYRE_RETURN_IF_ERROR((*world)[r]->Allreduce(in.data(), out.data(), n, DataType::kFloat32,
                                                  ReduceOp::kSum, forced));
      if ((*world)[r]->last().spec.algorithm != Algorithm::kRing) return InternalError("not ring");
      CallOptions canonical;
      canonical.deterministic = 1;
      GYRE_RETURN_IF_ERROR((*world)[r]->Allreduce(in.data(), out.data(), n, DataType::kFloat32,
                                                  ReduceOp::kSum, canonical));
      if ((*world)[r]->last().spec.algorithm != Algorithm::kCanonical) {
        return InternalError("not canonical");
      }
    }
    // No agreement ran: one sequence number per call.
    if ((*world)[r]->next_seq() != uint64_t(2 * kTrials) + 1) {
      return InternalError("next_seq " + std::to_string((*world)[r]->next_seq()));
    }
    return Status::Ok();
  });
  for (int r = 0; r < kP; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
}

TEST_F(TuningTest, ARankThatTunesAloneIsAMismatchNamedOnItsPeers) {
  std::vector<algo::Estimate> close;
  const int64_t count = AllreduceCountWithRivals(&close);
  ASSERT_GE(close.size(), 2u);
  auto transports = LoopbackHub::CreateWorld(kP);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < kP; ++r) {
    CommOptions o = Tuned(r == 2);
    o.timeout = Seconds(2);
    comms.push_back(std::make_unique<Communicator>(std::move(transports[r]), o));
  }
  auto statuses = RunOnRanks(kP, [&](int r) -> Status {
    std::vector<int32_t> in(static_cast<size_t>(count), r), out(static_cast<size_t>(count));
    for (int call = 0; call < 4; ++call) {
      GYRE_RETURN_IF_ERROR(
          comms[r]->Allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum));
      for (int32_t v : out) {
        if (v != kP * (kP - 1) / 2) return InternalError("silently wrong data");
      }
    }
    return Status::Ok();
  });
  // Rank 2's second call runs the model's runner-up where the others run its choice.
  int named = 0;
  for (int r = 0; r < kP; ++r) {
    std::printf("rank %d: %s\n", r, statuses[r].ToString().c_str());
    ASSERT_FALSE(statuses[r].ok()) << "rank " << r << " finished";
    EXPECT_EQ(statuses[r].message().find("silently wrong"), std::string::npos);
    // Rank 2's own error always names it ("on rank 2"): only its peers count.
    if (r != 2 && statuses[r].message().find("rank 2") != std::string::npos) ++named;
  }
  EXPECT_GE(named, 1) << statuses[0];
}

}  // namespace
}  // namespace gyre::testing
