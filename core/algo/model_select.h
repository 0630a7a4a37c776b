// Automatic algorithm choice from a calibrated cost model: every candidate's schedule is
// walked (estimate.h) under the parameters this machine measured for the job's world size,
// and the fastest estimate wins. Decisions are cached per (collective, element size, count
// bucket, world size, local_size, segment, grid), so a call after the first of its bucket
// costs one hash lookup. A job spread over hosts keeps the measured thresholds of select.h:
// the model has no term for the slower links between hosts.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/algo/collective.h"
#include "core/algo/cost.h"
#include "core/algo/estimate.h"
#include "core/algo/select.h"

namespace gyre::algo {

// Beyond this many ranks the measured thresholds of select.h decide, not the model: the
// first call of a bucket would walk p^2 messages per candidate.
inline constexpr int kMaxModelRanks = 64;

// The machine as seen by a job of `world_size` ranks (ranks time-share the cores when
// world_size > cores, so every cost is measured at the size it is used at).
struct MachinePoint {
  int world_size = 0;
  double alpha_s = 0;           // latency of one round (one message on the critical path)
  double overhead_s = 0;        // CPU per message sent or received, serialised on a rank
  double beta_s_per_byte = 0;   // per byte one rank sends while few others work
  double gamma_s_per_byte = 0;  // per byte reduced (0: free)
  double delta_s_per_byte = 0;  // per byte copied (0: free)
  // The same per byte when every rank works at once (0: no throughput bound).
  double beta_all_s_per_byte = 0;
  double gamma_all_s_per_byte = 0;
  double delta_all_s_per_byte = 0;
};

struct MachineModel {
  int cores = 2;  // CPUs the ranks share; rank r is taken to run on core r mod cores
  std::vector<MachinePoint> points;  // by world_size, at least one
  std::string source = "built-in";   // the calibration file, or "built-in"

  // The parameters for p ranks: the point measured at p, else the nearest measured size q
  // with every cost scaled by the CPU-sharing factor max(1, p/cores) / max(1, q/cores).
  MachinePoint At(int p) const;
  // Replaces or adds the point of world size point.world_size.
  void SetPoint(const MachinePoint& point);
};

// Measured on this machine class (2 cores, loopback TCP, embedded mode; gyre-bench
// --calibrate at 2, 4 and 8 ranks): see bench/results/2026-12-02-auto.md.
MachineModel DefaultMachineModel();

// The calibration file: "key = value" lines, '#' starts a comment:
//   cores = 2
//   p4.alpha_us = 55.0      # one key per cost and world size: p<N>.<key>
//   p4.overhead_us = 9.0
//   p4.beta_GBps = 3.2      # bandwidth of one rank's sends while the others wait
//   p4.reduce_GBps = 8.1    # 0: reduction not modelled
//   p4.copy_GBps = 9.5      # 0: copies not modelled
//   p4.beta_all_GBps = 1.0  # the same with every rank at work (0 or absent: no bound)
//   p4.reduce_all_GBps = 4.0
//   p4.copy_all_GBps = 5.0
// A value is a plain decimal number (no hex, inf or nan), 0 or from 1e-300 to 1e300; every
// error names the file, the line and the key.
StatusOr<MachineModel> ParseMachineModel(const std::string& text, const std::string& path);
// Reads at most kMaxCalibrationFileBytes (+1): a larger file, or /dev/zero, is refused.
inline constexpr size_t kMaxCalibrationFileBytes = size_t{1} << 20;
StatusOr<MachineModel> ReadMachineModel(const std::string& path);
std::string FormatMachineModel(const MachineModel& model);
Status WriteMachineModel(const std::string& path, const MachineModel& model);

CostParams CostParamsOf(const MachinePoint& point);
SharedCosts SharedCostsOf(const MachinePoint& point, int cores);
// "p=4: alpha 55.0 us/round, overhead 9.0 us/msg, 1.60 GB/s, reduce 2.10 GB/s, copy 3.50 GB/s"
std::string DescribePoint(const MachinePoint& point);

// True when spec.local_size says the ranks sit on several hosts in equal blocks.
bool SpansHosts(const CollectiveSpec& spec);

// Every candidate's estimate for `spec` under `model`, fastest first (spec.algorithm is
// ignored; on one host hierarchical and two_d are candidates with their default shapes).
std::vector<Estimate> RankCandidates(const CollectiveSpec& spec, const MachineModel& model);

// A sentence on why candidates.front() wins: by how much over the runner-up, and which
// cost term (rounds, per-message overhead, bytes, reduction) makes the difference.
std::string ExplainChoice(const CollectiveSpec& spec, const MachineModel& model,
                          const std::vector<Estimate>& candidates);

class ModelSelector {
 public:
  explicit ModelSelector(MachineModel model,
                         SelectionThresholds across_hosts = SelectionThresholds());

  // `spec` with a concrete algorithm (spec.algorithm is ignored): on one host the model's
  // fastest at the count's bucket, across hosts SelectAlgorithm. spec.local_size is kept
  // for hierarchical across hosts and cleared otherwise (one host: the builder's default).
  // Thread-safe.
  CollectiveSpec Choose(const CollectiveSpec& spec);
  // The same without the cache (what Choose caches).
  CollectiveSpec ChooseUncached(const CollectiveSpec& spec) const;

  const MachineModel& model() const { return model_; }
  size_t cache_size() const;

  // The count whose estimate decides every count of its bucket: counts below 64 are their
  // own bucket, larger ones share a bucket per quarter octave (lower bound).
  static int64_t BucketCount(int64_t count);

 private:
  struct Key {
    uint64_t a;  // collective, element size, bucket count
    uint64_t b;  // world size, local_size
    int64_t segment_elems;
    int grid_rows;
    bool operator==(const Key& o) const {
      return a == o.a && b == o.b && segment_elems == o.segment_elems && grid_rows == o.grid_rows;
    }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = k.a * 0x9E3779B97F4A7C15ull ^ (k.b + 0x632BE59BD9B4E019ull);
      h ^= static_cast<uint64_t>(k.segment_elems) * 0xC2B2AE3D27D4EB4Full;
      h ^= static_cast<uint64_t>(k.grid_rows) << 7;
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };
  struct Choice {
    Algorithm algorithm;
    int local_size;
  };
  static Key KeyOf(const CollectiveSpec& spec);
  Choice Decide(const CollectiveSpec& spec) const;

  MachineModel model_;
  SelectionThresholds across_hosts_;
  mutable std::mutex mu_;
  std::unordered_map<Key, Choice, KeyHash> cache_;
};

}  // namespace gyre::algo
