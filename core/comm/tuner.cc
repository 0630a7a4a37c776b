#include "core/comm/tuner.h"

#include <algorithm>
#include <cstdio>

#include "core/algo/model_select.h"
#include "core/base/dtype.h"

namespace gyre {
namespace {

std::string FormatNs(int64_t ns) {
  char buf[32];
  if (ns >= 1000000) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f us", static_cast<double>(ns) / 1e3);
  }
  return buf;
}

// An hour per rank: the figure of a candidate with no timed trial (not reachable: every
// candidate has at least one timed round).
constexpr int64_t kNoFigure = int64_t{3600} * 1000000000;

}  // namespace

OnlineTuner::Key OnlineTuner::KeyOf(const algo::CollectiveSpec& spec) {
  return Key{static_cast<int>(spec.collective),
             static_cast<int>(DataTypeSize(spec.dtype)),
             algo::ModelSelector::BucketCount(spec.count),
             spec.world_size,
             spec.segment_elems,
             spec.grid_rows};
}

int64_t OnlineTuner::Fingerprint(const std::vector<Candidate>& candidates) {
  // Below 2^16, so that p x f^2 cannot overflow for any p the tuner runs at (<= 64).
  int64_t f = static_cast<int64_t>(candidates.size());
  for (const Candidate& c : candidates) f = (f * 31 + static_cast<int64_t>(c.algorithm)) % 65521;
  return f + 1;
}

OnlineTuner::Plan OnlineTuner::Next(
    const algo::CollectiveSpec& spec,
    const std::function<std::vector<Candidate>()>& rank_candidates) {
  Plan plan;
  plan.algorithm = spec.algorithm;
  const Key key = KeyOf(spec);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= kMaxBuckets) return plan;
    Bucket b;
    for (const Candidate& c : rank_candidates()) {
      if (static_cast<int>(b.candidates.size()) == kMaxCandidates) break;
      if (!b.candidates.empty() &&
          c.estimate_s > b.candidates.front().estimate_s * kMaxEstimateRatio) {
        break;
      }
      const bool seen =
          c.shape != 0 &&
          std::any_of(b.candidates.begin(), b.candidates.end(), [&](const Candidate& t) {
            return t.shape == c.shape && t.estimate_s == c.estimate_s;
          });
      if (!seen) b.candidates.push_back(c);
    }
    // The model's choice is the first candidate: the caller resolved `spec` with it. A
    // bucket without a close rival still runs its trial calls and the agreement (all of the
    // model's choice), so that every rank agrees at the same call whatever its model.
    if (b.candidates.empty() || b.candidates.front().algorithm != spec.algorithm) {
      b.candidates.assign(1, Candidate{spec.algorithm, 0});
    }
    b.timed_ns.resize(b.candidates.size());
    it = buckets_.emplace(key, std::move(b)).first;
  }
  Bucket& b = it->second;
  const int k = static_cast<int>(b.candidates.size());
  if (b.chosen >= 0) {
    plan.algorithm = b.candidates[static_cast<size_t>(b.chosen)].algorithm;
    return plan;
  }
  if (b.calls < kTrialCalls) {
    // Each round starts one candidate later, so no candidate always follows the same one.
    plan.trial = (b.calls % k + b.calls / k) % k;
    plan.algorithm = b.candidates[static_cast<size_t>(plan.trial)].algorithm;
    return plan;
  }
  plan.agree.assign(kAgreeLength, 0);
  for (int c = 0; c < k; ++c) {
    std::vector<int64_t> t = b.timed_ns[static_cast<size_t>(c)];
    if (t.empty()) t.push_back(kNoFigure);
    std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
    plan.agree[static_cast<size_t>(c)] = t[t.size() / 2];
  }
  const int64_t f = Fingerprint(b.candidates);
  plan.agree[kMaxCandidates] = b.failed ? 1 : 0;
  plan.agree[kMaxCandidates + 1] = f;
  plan.agree[kMaxCandidates + 2] = f * f;
  return plan;
}

void OnlineTuner::Record(const algo::CollectiveSpec& spec, int trial, Duration elapsed, bool ok) {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end() || it->second.chosen >= 0 || it->second.calls >= kTrialCalls ||
      trial < 0 || trial >= static_cast<int>(it->second.candidates.size())) {
    return;
  }
  Bucket& b = it->second;
  const int round = b.calls / static_cast<int>(b.candidates.size());
  ++b.calls;
  if (!ok) {
    b.failed = true;
    return;
  }
  if (round < kWarmRounds) return;
  b.timed_ns[static_cast<size_t>(trial)].push_back(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
}

void OnlineTuner::Agreed(const algo::CollectiveSpec& spec, const std::vector<int64_t>& sums) {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end() || it->second.chosen >= 0) return;
  Bucket& b = it->second;
  b.chosen = 0;
  const int64_t p = spec.world_size;
  if (sums.size() != static_cast<size_t>(kAgreeLength)) {
    b.why = "the agreement returned " + std::to_string(sums.size()) + " values";
  } else if (sums[kMaxCandidates] > 0) {
    b.why = "a trial failed on " + std::to_string(sums[kMaxCandidates]) + " rank(s)";
  } else if (p * sums[kMaxCandidates + 2] != sums[kMaxCandidates + 1] * sums[kMaxCandidates + 1]) {
    b.why = "the ranks' models offered different candidates";
  } else if (b.candidates.size() < 2) {
    b.why = "no candidate within 1.5x of it in the model";
  } else {
    for (size_t c = 1; c < b.candidates.size(); ++c) {
      if (sums[c] < sums[static_cast<size_t>(b.chosen)]) b.chosen = static_cast<int>(c);
    }
    b.sums.assign(sums.begin(), sums.begin() + static_cast<long>(b.candidates.size()));
  }
}

void OnlineTuner::AgreementFailed(const algo::CollectiveSpec& spec) {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end() || it->second.chosen >= 0) return;
  it->second.chosen = 0;
  it->second.why = "the agreement failed";
}

void OnlineTuner::AbandonTrials(const std::string& why) {
  for (auto& [key, b] : buckets_) {
    if (b.chosen >= 0) continue;
    b.chosen = 0;
    b.why = why;
  }
}

std::string OnlineTuner::Describe(const algo::CollectiveSpec& spec) const {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end()) return "";
  const Bucket& b = it->second;
  if (b.chosen < 0) {
    return "tuning: " + std::to_string(b.calls) + " of " + std::to_string(kTrialCalls) +
           " trial calls made";
  }
  const std::string chosen =
      algo::AlgorithmName(b.candidates[static_cast<size_t>(b.chosen)].algorithm);
  if (b.sums.empty()) return "untuned: " + chosen + " (the model's choice): " + b.why;
  std::string out = "tuned: " + chosen + " " + FormatNs(b.sums[static_cast<size_t>(b.chosen)]);
  for (size_t c = 0; c < b.candidates.size(); ++c) {
    if (static_cast<int>(c) == b.chosen) continue;
    out += std::string(", ") + algo::AlgorithmName(b.candidates[c].algorithm) + " " +
           FormatNs(b.sums[c]);
  }
  return out + " (sums over " + std::to_string(spec.world_size) +
         " ranks of each rank's median trial)";
}

}  // namespace gyre
