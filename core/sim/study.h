// The studies gyre-sim prints: the topology study (ring mappings on a torus, all-to-all
// against its bisection and injection bounds, flat against hierarchical allreduce on a
// two-level cluster) and the calibration against gyre's own in-process loopback runs.
// Each table is also returned as data so tests can hold its claims.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/sim/mapping.h"
#include "core/sim/simulator.h"

namespace gyre::sim {

// Table 1: ring allreduce of `bytes` on 16 devices with 45 GB/s, 1 us links: switch,
// physical ring, 4x4 torus with snake / row-major / random mappings, and the 2-D allreduce
// on the torus. `ideal_s` is the single-ring ideal 2(p-1)/p n / beta.
struct MappingRow {
  std::string topology;
  std::string mapping;
  SimResult result;
  double ideal_s = 0;
};
StatusOr<std::vector<MappingRow>> MappingStudy(int64_t bytes);

// Table 2: pairwise all-to-all of `bytes_per_device` on switch, ring and torus for p = 16
// and 64, with the bounds in result.bounds.
struct AlltoallRow {
  int ranks = 0;
  std::string topology;
  SimResult result;
};
StatusOr<std::vector<AlltoallRow>> AlltoallStudy(int64_t bytes_per_device);

// Table 3: NODES x 8 GPUs (NVLink 450 GB/s inside, one 50 GB/s NIC per GPU): flat ring
// against hierarchical allreduce, with the ideal inter-node time 2(N-1)/N (n/8) / beta_NIC.
struct TwoLevelRow {
  int nodes = 0;
  int64_t bytes = 0;
  SimResult ring;
  SimResult hierarchical;
  double ideal_inter_s = 0;
};
StatusOr<std::vector<TwoLevelRow>> TwoLevelStudy();

// Prints the three tables with a sentence under each (and, with `json`, every run as one
// JSON line after the tables).
Status RunTopologyStudy(std::ostream& out, bool json);

// What the calibration needs from this machine. File format (JSON or "key = value" lines):
//   {"alpha_us": 25.0, "bandwidth_GBps": 4.1, "reduce_GBps": 3.2, "cores": 2}
// alpha_s / beta_s_per_byte are accepted instead of alpha_us / bandwidth_GBps, and so is the
// output of gyre-machine-limits --json (pingpong_4B_oneway_us, memcpy_GBps,
// reduce_f32_gyre_GBps).
struct Calibration {
  double alpha_s = 0;        // one message through the executor and the loopback
  double bandwidth_Bps = 0;  // bytes per second of one payload copy
  double reduce_Bps = 0;     // bytes per second of the reduction kernel (0: free)
  int cores = 2;             // CPUs the ranks share
};
StatusOr<Calibration> ReadCalibration(const std::string& path);
Status WriteCalibration(const std::string& path, const Calibration& c);
// Measures alpha and beta with gyre's own broadcasts of 4 B and 16 MiB between two ranks
// over the in-process loopback, and the float32 sum kernel's rate.
StatusOr<Calibration> MeasureCalibration();

struct CalibrationRow {
  int ranks = 0;
  int64_t bytes = 0;
  std::string algorithm;
  double predicted_s = 0;
  double measured_s = 0;
  double error = 0;  // (predicted - measured) / measured
};
// Predicts gyre's loopback allreduce for p = 2, 4, 8 at 1 KiB, 1 MiB, 16 MiB on the "bus"
// topology (the loopback copies one payload at a time) and measures the same calls.
StatusOr<std::vector<CalibrationRow>> CalibrationStudy(const Calibration& c);
Status RunCalibration(const Calibration& c, std::ostream& out, bool json);

}  // namespace gyre::sim
