#include "core/comm/tuner.h"

#include <algorithm>
#include <cstdio>

#include "core/algo/model_select.h"
#include "core/base/dtype.h"

namespace gyre {
namespace {

std::string Micros(int64_t ns) {
  char buf[32];
  if (ns >= 10000000) {
    std::snprintf(buf, sizeof(buf), "%.2f ms", static_cast<double>(ns) / 1e6);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f us", static_cast<double>(ns) / 1e3);
  }
  return buf;
}

}  // namespace

OnlineTuner::Key OnlineTuner::KeyOf(const algo::CollectiveSpec& spec) {
  return Key{static_cast<int>(spec.collective),
             static_cast<int>(DataTypeSize(spec.dtype)),
             algo::ModelSelector::BucketCount(spec.count),
             spec.world_size,
             spec.segment_elems,
             spec.grid_rows};
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
      b.candidates.push_back(c);
    }
    // The model's choice must be the first candidate: the caller resolved `spec` with it.
    if (b.candidates.size() < 2 || b.candidates.front().algorithm != spec.algorithm) {
      b.candidates.assign(1, Candidate{spec.algorithm, 0});
      b.chosen = 0;
    }
    b.timed_ns.resize(b.candidates.size());
    it = buckets_.emplace(key, std::move(b)).first;
  }
  Bucket& b = it->second;
  if (b.chosen >= 0) {
    plan.algorithm = b.candidates[static_cast<size_t>(b.chosen)].algorithm;
    return plan;
  }
  if (b.calls < TrialCalls(b)) {
    plan.trial = b.calls % static_cast<int>(b.candidates.size());
    plan.algorithm = b.candidates[static_cast<size_t>(plan.trial)].algorithm;
    return plan;
  }
  for (std::vector<int64_t> t : b.timed_ns) {
    // Every timed trial succeeded (a failure decides at once), so each has kTimedCalls; an
    // empty one (not reachable) would count as an hour per rank.
    if (t.empty()) t.push_back(int64_t{3600} * 1000000000);
    std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
    plan.agree.push_back(t[t.size() / 2]);
  }
  return plan;
}

void OnlineTuner::Record(const algo::CollectiveSpec& spec, int trial, Duration elapsed, bool ok) {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end() || it->second.chosen >= 0 || trial < 0 ||
      trial >= static_cast<int>(it->second.candidates.size())) {
    return;
  }
  Bucket& b = it->second;
  if (!ok) {
    b.chosen = 0;
    return;
  }
  const int round = b.calls / static_cast<int>(b.candidates.size());
  ++b.calls;
  if (round < kWarmCalls) return;
  b.timed_ns[static_cast<size_t>(trial)].push_back(
      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
}

void OnlineTuner::Agreed(const algo::CollectiveSpec& spec, const std::vector<int64_t>& sums) {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end() || it->second.chosen >= 0) return;
  Bucket& b = it->second;
  b.chosen = 0;
  if (sums.size() != b.candidates.size()) return;
  for (size_t c = 1; c < sums.size(); ++c) {
    if (sums[c] < sums[static_cast<size_t>(b.chosen)]) b.chosen = static_cast<int>(c);
  }
  b.sums = sums;
}

std::string OnlineTuner::Describe(const algo::CollectiveSpec& spec) const {
  auto it = buckets_.find(KeyOf(spec));
  if (it == buckets_.end()) return "";
  const Bucket& b = it->second;
  if (b.chosen < 0) {
    return "tuning: " + std::to_string(b.calls) + " of " + std::to_string(TrialCalls(b)) +
           " trial calls made";
  }
  const std::string chosen =
      algo::AlgorithmName(b.candidates[static_cast<size_t>(b.chosen)].algorithm);
  if (b.sums.empty()) {
    return b.candidates.size() < 2 ? "untuned: " + chosen + " has no close rival in the model"
                                   : "untuned: a trial failed, " + chosen + " (the model's choice)";
  }
  std::string out = "tuned: " + chosen + " " + Micros(b.sums[static_cast<size_t>(b.chosen)]);
  for (size_t c = 0; c < b.candidates.size(); ++c) {
    if (static_cast<int>(c) == b.chosen) continue;
    out += std::string(", ") + algo::AlgorithmName(b.candidates[c].algorithm) + " " +
           Micros(b.sums[c]);
  }
  return out + " (sums over " + std::to_string(spec.world_size) +
         " ranks of each rank's median trial)";
}

}  // namespace gyre
