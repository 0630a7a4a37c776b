// Online tuning of the automatic choice (CommOptions::tune, gyrerun --tune, GYRE_TUNE=1).
//
// The cost model is calibrated once, and some costs it cannot see change while a job runs: on
// a shared machine, whether two ranks' processes sit on one CPU or on two decides whether a
// chain or a binomial broadcast is faster at 1-64 MiB (docs/algorithms.md). With tuning on,
// the first calls of each size bucket try the model's best few candidates in turn, the ranks
// add up what each candidate took, and the fastest runs every later call of the bucket.
//
// Every rank makes the same decisions: a bucket's state moves only with calls (failed or
// not), which every rank makes in the same order, so every rank reaches the agreement (one
// small allreduce) at the same call, and the decision is taken from the sums all ranks
// computed together, never from one rank's own clock. A trial that failed on any rank, or
// candidate lists that differ between ranks (models calibrated apart), keep the model's
// choice everywhere. A rank that tunes while another does not would run a different algorithm
// in a trial: a job joined through job::JoinJob is refused at its start then, as for models
// that differ (Communicator::choice_basis).
//
// This class is the bookkeeping only; the Communicator runs the calls and the allreduce.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/algo/collective.h"
#include "core/base/clock.h"

namespace gyre {

class OnlineTuner {
 public:
  // At most this many candidates are tried: the model's fastest and the next ones whose
  // estimate is within kMaxEstimateRatio of it (a candidate the model puts 1.5x behind has
  // not been seen to win on this machine, and each one tried costs calls).
  static constexpr int kMaxCandidates = 3;
  static constexpr double kMaxEstimateRatio = 1.5;
  // Every bucket runs this many trial calls, whatever its number of candidates k (so that
  // ranks whose models disagree on k still agree at the same call): the candidates in turn,
  // each round in another order; the first round is not timed (it builds and checks the
  // schedules, and touches the buffers), the median of the others is that rank's figure.
  static constexpr int kTrialCalls = 12;
  static constexpr int kWarmRounds = 1;
  // Only calls of at least this many bytes (count x element size) are tuned. Below it one
  // call's time is mostly the ranks' arrival skew and scheduling, which a few back-to-back
  // trials do not average out: tuned allreduce from 4 B to 64 KiB at p = 4 and 8 kept tree,
  // direct or Rabenseifner in some rounds and measured 1.07-1.29x the model's choice, where
  // from 1 MiB up it measured 0.79-1.10x (bench/results/2026-12-04-tuning.md).
  static constexpr int64_t kMinBytes = int64_t{1} << 20;
  // Buckets tracked at once; beyond, a bucket runs the model's choice untuned.
  static constexpr size_t kMaxBuckets = 4096;
  // The agreement vector: one median per candidate slot, then whether a trial failed on
  // this rank, then a fingerprint f of the candidate list and f^2. Summed over p ranks, the
  // lists were the same on every rank exactly when p * sum(f^2) == sum(f)^2.
  static constexpr int kAgreeLength = kMaxCandidates + 3;

  struct Candidate {
    algo::Algorithm algorithm;
    double estimate_s;
    // A digest of every figure of the model's estimate (rounds, messages, bytes, times); 0:
    // none given. Two candidates with the same non-zero shape are one schedule under two
    // names (on one host of 4 ranks hierarchical is the binomial tree for broadcast and the
    // 2 x 2 grid of two_d for allreduce): the later one is not tried, and its trial slot
    // goes to the next distinct candidate.
    uint64_t shape = 0;
  };

  // What the next call of a bucket does.
  struct Plan {
    algo::Algorithm algorithm = algo::Algorithm::kAuto;  // run this
    int trial = -1;  // >= 0: the call is a trial of that candidate; Record its outcome
    // Not empty (kAgreeLength values): the trials are over; first sum these across the
    // ranks and pass the sums to Agreed (or call AgreementFailed), then ask Next again.
    std::vector<int64_t> agree;
  };

  // `rank_candidates` is called once per bucket, on its first call: the model's candidates
  // for it, fastest first. `spec` is a call the automatic choice resolved for one host.
  Plan Next(const algo::CollectiveSpec& spec,
            const std::function<std::vector<Candidate>()>& rank_candidates);
  // A trial call's outcome: every trial call must be recorded, failed or not, on every
  // return path, so that the bucket moves with calls alone.
  void Record(const algo::CollectiveSpec& spec, int trial, Duration elapsed, bool ok);
  // The agreement's sums over spec.world_size ranks: the smallest time wins (ties: the
  // model's order), unless a trial failed on some rank or the ranks' candidate lists differ,
  // when every rank keeps the model's choice.
  void Agreed(const algo::CollectiveSpec& spec, const std::vector<int64_t>& sums);
  // The agreement itself failed: the model's choice, and no second agreement.
  void AgreementFailed(const algo::CollectiveSpec& spec);
  // A call failed or was refused on this rank: every bucket still in its trials keeps the
  // model's choice, without an agreement. Buckets move with calls, and a call refused on one
  // rank moves that rank's buckets unlike the others' (one refused before its count was known
  // moves none), which put the ranks a trial apart: every later trial call failed as a
  // divergence, and the agreement of one rank met a program's allreduce of another. Every
  // rank sees the failure of a call that failed anywhere, so all give their trials up.
  void AbandonTrials(const std::string& why);

  // What tuning decided for the bucket of `spec`, one line: "tuned: binomial 812.0 us, chain
  // 1.04 ms (sums over 4 ranks of each rank's median trial)", "tuning: 3 of 12 trial calls
  // made", "untuned: ..." with the reason, or empty when the bucket has not been seen.
  std::string Describe(const algo::CollectiveSpec& spec) const;

 private:
  using Key = std::tuple<int, int, int64_t, int, int64_t, int>;
  struct Bucket {
    std::vector<Candidate> candidates;
    std::vector<std::vector<int64_t>> timed_ns;  // per candidate, this rank's timed trials
    int calls = 0;                               // trial calls made
    bool failed = false;                         // a trial failed on this rank
    int chosen = -1;                             // once decided
    std::vector<int64_t> sums;                   // the agreed time sums, when they decided
    std::string why;                             // why the model's choice stays, if it does
  };
  static Key KeyOf(const algo::CollectiveSpec& spec);
  static int64_t Fingerprint(const std::vector<Candidate>& candidates);

  std::map<Key, Bucket> buckets_;
};

}  // namespace gyre
