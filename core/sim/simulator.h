// Simulate one collective: build every rank's schedule with the same builders the daemon
// runs, execute them with one OpRun per rank over a SimWorld on a modelled network, check
// the result against the sequential reference (real data) and report time, bandwidth,
// steps, per-link bytes, the busiest link and the ratio to a lower bound.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/algo/collective.h"
#include "core/base/clock.h"
#include "core/sim/mapping.h"
#include "core/sim/topology.h"

namespace gyre::sim {

struct SimOptions {
  std::string topology = "switch";  // see MakeTopology
  TopologyOptions topology_options;
  std::string mapping = "identity";  // see MakeMapping
  // Sizes only: no buffer is allocated or touched (for scale runs). Otherwise every rank
  // runs on real data and its output is compared with the sequential reference.
  bool phantom = false;
  // Each message is timed as its bytes times this, so 64 MiB can be timed while
  // correctness is checked on a few thousand elements. The call simulated is the timed
  // one: Algorithm::kAuto is chosen for count x byte_scale elements, as gyre would choose
  // for a call of that size.
  int64_t byte_scale = 1;
  double reduce_bytes_per_s = 0;  // 0: reductions are free (the cost model's default)
  // The whole schedule goes through VerifySchedule up to this many ranks.
  int verify_max_ranks = 64;
  Duration wall_limit = Seconds(600);
};

struct LinkReport {
  int id = 0;
  std::string name;
  int64_t bytes = 0;
  int64_t messages = 0;
  double utilisation = 0;  // busy time / simulated time
};

// Lower bounds on the operation's time on this network (see docs/simulator.md):
// latency: the longest route latency into rank 0 (or out of / into the root);
// injection: the bytes some rank must send over its device's outgoing links;
// bisection (alltoall): p*n/4 bytes across the balanced cut.
struct LowerBounds {
  double latency_s = 0;
  double injection_s = 0;
  double bisection_s = 0;
  double Max() const;
};

struct SimResult {
  algo::CollectiveSpec spec;  // the concrete algorithm that ran
  std::string topology;
  std::string mapping;
  bool phantom = false;
  int64_t byte_scale = 1;
  int64_t time_ns = 0;
  int64_t bytes = 0;  // the BENCH.md size of the call, timed (scaled) bytes
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  int64_t steps = 0;  // messages on the longest dependency chain
  int64_t messages = 0;
  double mean_hops = 0;  // links crossed per message
  int max_hops = 0;
  std::vector<LinkReport> links;  // every link that carried bytes, by id
  int busiest = -1;               // index into links
  int64_t link_bytes = 0;         // sum over links
  LowerBounds bounds;
  double ratio_to_bound = 0;  // time / bounds.Max()
  bool checked = false;
  bool ok = true;
  std::string mismatch;  // the first differing element, when !ok
  int64_t events = 0;
  double wall_s = 0;
  double events_per_s = 0;
};

// The memory a run holds at its peak, estimated from a few ranks' schedules before the rest
// are built (docs/simulator.md, "Scale"): every rank's steps and their dependencies, the
// messages a rank can have in flight at once, the executor's per-peer counters (p x p) and,
// with real data, the buffers.
struct MemoryEstimate {
  int64_t bytes = 0;
  int64_t busiest_steps = 0;  // steps of the busiest rank sampled
  int busiest_rank = 0;
};
StatusOr<MemoryEstimate> EstimateMemory(const algo::CollectiveSpec& spec,
                                        const SimOptions& options);
// The bytes this process could still get: AvailableMemory() (core/base/large_memory.h), and
// under an address-space limit (ulimit -v) what is left of it; nullopt when neither is known.
std::optional<uint64_t> MemoryLeftForSimulation();

// Both refuse (ResourceExhausted, naming the estimate and what is available) a run whose
// estimate is more than MemoryLeftForSimulation(), before building it.
StatusOr<SimResult> Simulate(const algo::CollectiveSpec& spec, const SimOptions& options);
// On an already built topology and mapping (options.topology and mapping are ignored).
StatusOr<SimResult> SimulateOn(const algo::CollectiveSpec& spec, const Topology& topology,
                               const std::vector<int>& mapping, const SimOptions& options);

LowerBounds ComputeLowerBounds(const algo::CollectiveSpec& spec, int64_t byte_scale,
                               const Topology& topology, const std::vector<int>& mapping);
int64_t CallBytes(const algo::CollectiveSpec& spec);  // BENCH.md "bytes", unscaled
double BusBandwidthFactor(const algo::CollectiveSpec& spec);

// Human-readable report (`top_links` busiest links listed) and one-line JSON.
std::string FormatResult(const SimResult& r, int top_links = 3);
std::string ResultJson(const SimResult& r, bool with_links = false);

// "1.234 ms", "56.7 us", "890 ns".
std::string FormatNs(double ns);
std::string FormatBytes(double bytes);  // "64 MiB", "1.5 KiB"

}  // namespace gyre::sim
