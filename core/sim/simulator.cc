#include "core/sim/simulator.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <unordered_map>

#include "core/algo/builders.h"
#include "core/algo/select.h"
#include "core/algo/verifier.h"
#include "core/base/large_memory.h"
#include "core/comm/communicator.h"
#include "core/comm/selfcheck.h"
#include "core/exec/executor.h"
#include "core/sim/network.h"
#include "core/sim/sim_world.h"

namespace gyre::sim {

using algo::Collective;
using algo::CollectiveSpec;

double LowerBounds::Max() const { return std::max({latency_s, injection_s, bisection_s}); }

int64_t CallBytes(const CollectiveSpec& s) {
  const int64_t es = static_cast<int64_t>(DataTypeSize(s.dtype));
  const int64_t p = s.world_size;
  switch (s.collective) {
    case Collective::kAllreduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
      return s.count * es;
    case Collective::kAllgather:
    case Collective::kReduceScatter:
    case Collective::kAlltoall:
    case Collective::kGather:
    case Collective::kScatter:
      return p * s.count * es;
    case Collective::kBarrier:
      return 0;
  }
  return 0;
}

double BusBandwidthFactor(const CollectiveSpec& s) {
  const double p = s.world_size;
  switch (s.collective) {
    case Collective::kAllreduce:
      return 2 * (p - 1) / p;
    case Collective::kBroadcast:
    case Collective::kReduce:
      return 1;
    case Collective::kBarrier:
      return 0;
    default:
      return (p - 1) / p;
  }
}

LowerBounds ComputeLowerBounds(const CollectiveSpec& s, int64_t byte_scale,
                               const Topology& topology, const std::vector<int>& mapping) {
  LowerBounds b;
  const int p = s.world_size;
  if (p <= 1) return b;
  const double es = static_cast<double>(DataTypeSize(s.dtype)) * static_cast<double>(byte_scale);
  const double n = static_cast<double>(s.count) * es;  // one rank's buffer or block, timed
  if (s.count == 0 && s.collective != Collective::kBarrier) return b;
  double slowest_port = -1;
  for (int r = 0; r < p; ++r) {
    const double bw = topology.InjectionBandwidth(mapping[r]);
    if (slowest_port < 0 || bw < slowest_port) slowest_port = bw;
  }
  // Unrooted collectives do not check their root (gyre marks its own calls with a negative
  // one): rank 0's port stands in.
  const int root = s.root >= 0 && s.root < p ? s.root : 0;
  const double root_port = topology.InjectionBandwidth(mapping[root]);
  const bool from_root =
      s.collective == Collective::kBroadcast || s.collective == Collective::kScatter;
  const bool to_root = s.collective == Collective::kReduce || s.collective == Collective::kGather;
  int64_t latency_ns = 0;
  for (int q = 0; q < p; ++q) {
    int64_t l;
    if (from_root) {
      l = topology.RouteLatencyNs(mapping[s.root], mapping[q]);
    } else if (to_root) {
      l = topology.RouteLatencyNs(mapping[q], mapping[s.root]);
    } else {
      l = topology.RouteLatencyNs(mapping[q], mapping[0]);
    }
    latency_ns = std::max(latency_ns, l);
  }
  b.latency_s = static_cast<double>(latency_ns) * 1e-9;
  double must_send = 0;  // bytes some rank must put on its device's outgoing links
  double port = slowest_port;
  switch (s.collective) {
    case Collective::kAllreduce:
      must_send = 2.0 * (p - 1) / p * n;
      break;
    case Collective::kReduceScatter:
    case Collective::kAllgather:
    case Collective::kAlltoall:
      must_send = (p - 1) * n;
      break;
    case Collective::kBroadcast:
      must_send = n;
      port = root_port;
      break;
    case Collective::kScatter:
      must_send = (p - 1) * n;
      port = root_port;
      break;
    case Collective::kReduce:
    case Collective::kGather:
      must_send = n;
      break;
    case Collective::kBarrier:
      break;
  }
  if (port > 0) b.injection_s = must_send / port;
  if (s.collective == Collective::kAlltoall && topology.BisectionBandwidth() > 0) {
    // Half the ranks send a quarter of everything to the other half.
    const double per_device = p * n;
    b.bisection_s = p * per_device / 4 / topology.BisectionBandwidth();
  }
  return b;
}

namespace {

// Bytes per item at a run's peak, fitted to the peak RSS of --phantom runs of ring, direct,
// pairwise and Bruck schedules at 128 to 4096 ranks (docs/simulator.md, "Scale") and rounded
// up: a step is held by its schedule, its OpRun and the SimWorld (a receive slot with its
// callback); a message in flight by the SimWorld's pool; a pair of ranks by the executor's
// per-peer counters and progress marks (48 bytes per peer of every rank).
constexpr int64_t kBytesPerStep = 300;
constexpr int64_t kBytesPerDependency = 8;
constexpr int64_t kBytesPerMessageInFlight = 320;
constexpr int64_t kBytesPerRankPair = 52;
// The program, the topology and its routes, the allocator's slack.
constexpr int64_t kBaseBytes = int64_t{16} << 20;

// One rank's share of a run's memory.
struct RankLoad {
  int64_t steps = 0;
  int64_t dependencies = 0;
  // Sends that can be in flight together: those at the same level, counting the receives
  // on their longest dependency chain, and a rank's k-th receive from one peer as after its
  // earlier ones (a ring sends one at a time, a pairwise alltoall all at once).
  int64_t sends_at_once = 0;
  double data_bytes = 0;  // real data: input, output, scratch, and a copy in flight
};

RankLoad LoadOf(const CollectiveSpec& spec, const algo::RankSchedule& rs, bool phantom) {
  RankLoad load;
  load.steps = static_cast<int64_t>(rs.steps.size());
  std::vector<int32_t> level(rs.steps.size(), 0);
  std::unordered_map<int32_t, int32_t> received_from;  // receives so far, by peer
  std::vector<int64_t> sends_at_level(1, 0);
  for (size_t i = 0; i < rs.steps.size(); ++i) {
    const algo::Step& step = rs.steps[i];
    load.dependencies += static_cast<int64_t>(step.deps.size());
    int32_t at = 0;
    for (int32_t d : step.deps) {
      if (d < 0 || static_cast<size_t>(d) >= i) continue;
      at = std::max(at, level[d] + (rs.steps[d].kind == algo::StepKind::kRecv ? 1 : 0));
    }
    if (step.kind == algo::StepKind::kRecv) at = std::max(at, received_from[step.peer]++);
    level[i] = at;
    if (step.kind == algo::StepKind::kSend) {
      if (sends_at_level.size() <= static_cast<size_t>(at)) sends_at_level.resize(at + 1, 0);
      load.sends_at_once = std::max(load.sends_at_once, ++sends_at_level[at]);
    }
  }
  if (!phantom) {
    // In double: each buffer may be up to kMaxCallBytes, and p of them overflow an int64_t.
    load.data_bytes = 2.0 * static_cast<double>(DataTypeSize(spec.dtype)) *
                      (static_cast<double>(algo::InputCount(spec, rs.rank)) +
                       static_cast<double>(algo::OutputCount(spec, rs.rank)) +
                       static_cast<double>(rs.scratch_count));
  }
  return load;
}

double BytesOf(const RankLoad& l) {
  return static_cast<double>(l.steps * kBytesPerStep + l.dependencies * kBytesPerDependency +
                             l.sends_at_once * kBytesPerMessageInFlight) +
         l.data_bytes;
}

// The spec as it will run: deterministic applied, the automatic algorithm chosen. gyre
// chooses by the size of the call, and the call simulated is the timed one, count x byte
// scale elements; the real count only stands in for it to check the data (a 64 MiB
// allreduce checked on 2048 elements must run what gyre runs at 64 MiB).
// A timed call over 1 GiB runs in segments as gyre's do when none was asked for
// (algo::LargeCallSegmentElems): a real element stands for `byte_scale` timed ones.
CollectiveSpec Resolved(CollectiveSpec spec, int64_t byte_scale) {
  if (!algo::IsReducing(spec.collective)) spec.deterministic = false;
  CollectiveSpec timed = spec;
  // Held within the sizes gyre accepts, where every size choice is already made, so that
  // the selection's own byte arithmetic cannot overflow.
  const int64_t most = algo::kMaxCallBytes / static_cast<int64_t>(DataTypeSize(spec.dtype)) /
                       std::max(spec.world_size, 1);
  const int64_t scale = std::max<int64_t>(byte_scale, 1);
  timed.count = spec.count > most / scale ? most : spec.count * scale;
  timed.segment_elems = algo::LargeCallSegmentElems(timed);
  if (spec.segment_elems == 0 && timed.segment_elems > 0) {
    spec.segment_elems = std::max<int64_t>(1, timed.segment_elems / scale);
  }
  if (spec.deterministic) {
    spec.algorithm = algo::Algorithm::kCanonical;
  } else if (spec.algorithm == algo::Algorithm::kAuto) {
    spec.algorithm = algo::SelectAlgorithm(timed);
  }
  return spec;
}

}  // namespace

StatusOr<MemoryEstimate> EstimateMemory(const CollectiveSpec& spec_in, const SimOptions& options) {
  GYRE_RETURN_IF_ERROR(algo::ValidateSpec(spec_in));
  const CollectiveSpec spec = Resolved(spec_in, options.byte_scale);
  const int p = spec.world_size;
  // The root's schedule (the busiest in rooted collectives) counts once; the busiest of the
  // others sampled, for every other rank.
  const int root = spec.root >= 0 && spec.root < p ? spec.root : 0;
  GYRE_ASSIGN_OR_RETURN(algo::RankSchedule root_schedule, algo::BuildRankSchedule(spec, root));
  const RankLoad root_load = LoadOf(spec, root_schedule, options.phantom);
  MemoryEstimate e;
  e.busiest_rank = root;
  e.busiest_steps = root_load.steps;
  RankLoad other;
  for (int r : {0, p / 2, p - 1, (root + 1) % p}) {
    if (r == root) continue;
    GYRE_ASSIGN_OR_RETURN(algo::RankSchedule rs, algo::BuildRankSchedule(spec, r));
    const RankLoad l = LoadOf(spec, rs, options.phantom);
    if (BytesOf(l) > BytesOf(other)) other = l;
    if (l.steps > e.busiest_steps) {
      e.busiest_steps = l.steps;
      e.busiest_rank = r;
    }
  }
  // Schedules verified whole are built twice over (the whole and the ranks').
  const double copies = p <= options.verify_max_ranks ? 2 : 1;
  const double bytes = static_cast<double>(kBaseBytes + int64_t{p} * p * kBytesPerRankPair) +
                       copies * (BytesOf(root_load) + (p - 1) * BytesOf(other));
  e.bytes = bytes < 9e18 ? static_cast<int64_t>(bytes) : std::numeric_limits<int64_t>::max();
  return e;
}

std::optional<uint64_t> MemoryLeftForSimulation() {
  std::optional<uint64_t> left = AvailableMemory();
  struct rlimit limit;
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    // What the process maps already counts against the limit.
    uint64_t pages = 0;
    std::ifstream statm("/proc/self/statm");
    statm >> pages;
    const uint64_t mapped = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t room = limit.rlim_cur > mapped ? limit.rlim_cur - mapped : 0;
    left = left ? std::min(*left, room) : room;
  }
  return left;
}

namespace {

Status CheckMemoryFits(const CollectiveSpec& spec, const SimOptions& options) {
  GYRE_ASSIGN_OR_RETURN(MemoryEstimate e, EstimateMemory(spec, options));
  const std::optional<uint64_t> left = MemoryLeftForSimulation();
  if (!left || static_cast<uint64_t>(e.bytes) <= *left) return Status::Ok();
  const CollectiveSpec resolved = Resolved(spec, options.byte_scale);
  const std::string p = std::to_string(spec.world_size);
  return ResourceExhaustedError(
      "simulating " + std::string(algo::CollectiveName(resolved.collective)) + " (" +
      algo::AlgorithmName(resolved.algorithm) + ") on " + p + " ranks needs about " +
      FormatBytes(static_cast<double>(e.bytes)) + " of memory (" + std::to_string(e.bytes) +
      " bytes: " + std::to_string(e.busiest_steps) + " steps on rank " +
      std::to_string(e.busiest_rank) + " of " + p + ", " + p + " x " + p + " per-peer counters" +
      (options.phantom ? "" : ", the real data") + "), more than the " +
      FormatBytes(static_cast<double>(*left)) + " (" + std::to_string(*left) +
      " bytes) this process can still get (MemAvailable, the memory cgroup's limit, ulimit -v): "
      "give fewer ranks" +
      (options.phantom ? "" : ", fewer real elements (or phantom buffers)") +
      " or an algorithm of fewer steps (recursive_doubling, tree)");
}

}  // namespace

StatusOr<SimResult> Simulate(const CollectiveSpec& spec, const SimOptions& options) {
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Topology> topology,
                        MakeTopology(options.topology, spec.world_size, options.topology_options));
  GYRE_ASSIGN_OR_RETURN(std::vector<int> mapping, MakeMapping(options.mapping, *topology));
  GYRE_ASSIGN_OR_RETURN(SimResult r, SimulateOn(spec, *topology, mapping, options));
  r.mapping = options.mapping;
  return r;
}

StatusOr<SimResult> SimulateOn(const CollectiveSpec& spec_in, const Topology& topology,
                               const std::vector<int>& mapping, const SimOptions& options) {
  CollectiveSpec spec = spec_in;
  GYRE_RETURN_IF_ERROR(algo::ValidateSpec(spec));
  const int p = spec.world_size;
  if (topology.num_devices() != p || static_cast<int>(mapping.size()) != p) {
    return InvalidArgumentError("the topology " + topology.name() + " has " +
                                std::to_string(topology.num_devices()) +
                                " devices and the mapping " + std::to_string(mapping.size()) +
                                " entries, but the call has " + std::to_string(p) + " ranks");
  }
  spec = Resolved(spec, options.byte_scale);
  if (options.byte_scale < 1) {
    return InvalidArgumentError("byte scale " + std::to_string(options.byte_scale) +
                                " must be at least 1");
  }
  // Refused up front: at 4096 ranks a ring's schedules alone are tens of GB, which ended in
  // the OOM killer (or, under ulimit -v, std::bad_alloc) rather than in an error.
  GYRE_RETURN_IF_ERROR(CheckMemoryFits(spec, options));

  // The same builders the daemon runs; verified whole where that is affordable.
  std::vector<algo::RankSchedule> schedules;
  if (p <= options.verify_max_ranks) {
    GYRE_ASSIGN_OR_RETURN(algo::Schedule whole, algo::BuildSchedule(spec));
    GYRE_RETURN_IF_ERROR(algo::VerifySchedule(whole));
    schedules = std::move(whole.ranks);
  } else {
    schedules.reserve(p);
    for (int r = 0; r < p; ++r) {
      GYRE_ASSIGN_OR_RETURN(algo::RankSchedule rs, algo::BuildRankSchedule(spec, r));
      schedules.push_back(std::move(rs));
    }
  }

  const size_t es = DataTypeSize(spec.dtype);
  std::vector<std::vector<unsigned char>> inputs(p), outputs(p), scratch(p);
  if (!options.phantom) {
    for (int r = 0; r < p; ++r) {
      inputs[r] = MakeInput(spec, r);
      outputs[r].assign(static_cast<size_t>(algo::OutputCount(spec, r)) * es, 0);
      scratch[r].assign(static_cast<size_t>(schedules[r].scratch_count) * es, 0);
    }
  }

  // A float16 average runs on its inputs divided by p, as the executor's Run divides them
  // (AverageScalesInputs); the reference below starts from the inputs as given.
  std::vector<std::vector<unsigned char>> run_inputs;
  const bool scales_inputs = algo::DividesInputsFirst(spec);
  if (scales_inputs && !options.phantom) {
    run_inputs = inputs;
    for (std::vector<unsigned char>& in : run_inputs) {
      GYRE_RETURN_IF_ERROR(ScaleForAverage(spec.dtype, in.data(), in.size() / es, p));
    }
  }
  const std::vector<std::vector<unsigned char>>& fed = scales_inputs ? run_inputs : inputs;

  Network network(&topology, mapping);
  SimWorld world(&network, p, SimWorldOptions{options.byte_scale, options.reduce_bytes_per_s});
  OpContext ctx;
  ctx.seq = 1;
  ctx.desc = MakeOpDesc(spec);
  ctx.name = std::string(algo::CollectiveName(spec.collective)) + " seq=1 (" +
             algo::AlgorithmName(spec.algorithm) + ", simulated on " + topology.name() + ")";
  std::vector<std::unique_ptr<OpRun>> runs;
  std::vector<OpRun*> run_ptrs;
  for (int r = 0; r < p; ++r) {
    OpBuffers buffers;
    unsigned char* scratch_ptr = nullptr;
    if (!options.phantom) {
      buffers.input = fed[r].empty() ? nullptr : fed[r].data();
      buffers.output = outputs[r].empty() ? nullptr : outputs[r].data();
      scratch_ptr = scratch[r].empty() ? nullptr : scratch[r].data();
    }
    runs.push_back(std::make_unique<OpRun>(schedules[r], spec, ctx, buffers, scratch_ptr,
                                           world.transport(r), options.phantom));
    GYRE_RETURN_IF_ERROR(runs.back()->Prepare());
    world.SetSchedule(r, &schedules[r], es);
    run_ptrs.push_back(runs.back().get());
  }
  const Clock& wall = *SteadyClock::Get();
  const TimePoint wall_start = wall.Now();
  GYRE_RETURN_IF_ERROR(world.Run(run_ptrs, Deadline::After(wall, options.wall_limit)));
  const double wall_s = std::chrono::duration<double>(wall.Now() - wall_start).count();

  SimResult res;
  res.spec = spec;
  res.topology = topology.name();
  res.mapping = "custom";
  res.phantom = options.phantom;
  res.byte_scale = options.byte_scale;
  res.time_ns = world.now_ns();
  res.bytes = CallBytes(spec) * options.byte_scale;
  if (res.time_ns > 0) {
    res.algbw_GBps = static_cast<double>(res.bytes) / static_cast<double>(res.time_ns);
    res.busbw_GBps = res.algbw_GBps * BusBandwidthFactor(spec);
  }
  res.steps = world.longest_chain();
  res.messages = world.messages();
  res.mean_hops = res.messages > 0
                      ? static_cast<double>(world.hops_total()) / static_cast<double>(res.messages)
                      : 0;
  res.max_hops = world.hops_max();
  const auto& stats = network.link_stats();
  for (size_t id = 0; id < stats.size(); ++id) {
    if (stats[id].messages == 0) continue;
    LinkReport l;
    l.id = static_cast<int>(id);
    l.name = topology.links()[id].name;
    l.bytes = stats[id].bytes;
    l.messages = stats[id].messages;
    l.utilisation = res.time_ns > 0
                        ? static_cast<double>(stats[id].busy_ns) / static_cast<double>(res.time_ns)
                        : 0;
    res.link_bytes += l.bytes;
    if (res.busiest < 0 || l.bytes > res.links[res.busiest].bytes ||
        (l.bytes == res.links[res.busiest].bytes &&
         l.utilisation > res.links[res.busiest].utilisation)) {
      res.busiest = static_cast<int>(res.links.size());
    }
    res.links.push_back(std::move(l));
  }
  res.bounds = ComputeLowerBounds(spec, options.byte_scale, topology, mapping);
  if (res.bounds.Max() > 0) {
    res.ratio_to_bound = static_cast<double>(res.time_ns) * 1e-9 / res.bounds.Max();
  }
  res.events = world.events();
  res.wall_s = wall_s;
  res.events_per_s = wall_s > 0 ? static_cast<double>(res.events) / wall_s : 0;

  if (!options.phantom) {
    res.checked = true;
    for (int r = 0; r < p && res.ok; ++r) {
      const int64_t out_count = algo::OutputCount(spec, r);
      if (spec.op == ReduceOp::kAvg && algo::IsReducing(spec.collective) && !scales_inputs &&
          out_count > 0) {
        GYRE_RETURN_IF_ERROR(
            ScaleForAverage(spec.dtype, outputs[r].data(), static_cast<size_t>(out_count), p));
      }
      const std::string diff = FirstDifference(spec, outputs[r], Reference(spec, inputs, r));
      if (!diff.empty()) {
        res.ok = false;
        res.mismatch = "rank " + std::to_string(r) + ": " + diff;
      }
    }
  }
  return res;
}

std::string FormatNs(double ns) {
  char buf[48];
  if (ns >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.3f s", ns / 1e9);
  } else if (ns >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.3f ms", ns / 1e6);
  } else if (ns >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%.2f us", ns / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f ns", ns);
  }
  return buf;
}

std::string FormatBytes(double b) {
  char buf[48];
  if (b >= 1024.0 * 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.4g GiB", b / (1024.0 * 1024 * 1024));
  } else if (b >= 1024.0 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.4g MiB", b / (1024.0 * 1024));
  } else if (b >= 1024) {
    std::snprintf(buf, sizeof(buf), "%.4g KiB", b / 1024);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  }
  return buf;
}

namespace {

const char* BoundName(const LowerBounds& b) {
  const double m = b.Max();
  if (m == b.bisection_s && m > 0) return "bisection";
  if (m == b.injection_s && m > 0) return "injection";
  return "latency";
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string FormatResult(const SimResult& r, int top_links) {
  std::ostringstream os;
  char line[256];
  os << r.spec.ToString() << " on " << r.topology << " (mapping " << r.mapping << ")";
  if (r.byte_scale > 1) os << ", timed as " << FormatBytes(static_cast<double>(r.bytes));
  if (r.phantom) os << ", phantom buffers";
  os << "\n";
  std::snprintf(line, sizeof(line),
                "  time %s   algbw %.3f GB/s   busbw %.3f GB/s   steps %lld   messages %lld "
                "(%.2f links each, max %d)\n",
                FormatNs(static_cast<double>(r.time_ns)).c_str(), r.algbw_GBps, r.busbw_GBps,
                static_cast<long long>(r.steps), static_cast<long long>(r.messages), r.mean_hops,
                r.max_hops);
  os << line;
  std::snprintf(line, sizeof(line),
                "  lower bound %s (%s; latency %s, injection %s, bisection %s): ratio %.3f\n",
                FormatNs(r.bounds.Max() * 1e9).c_str(), BoundName(r.bounds),
                FormatNs(r.bounds.latency_s * 1e9).c_str(),
                FormatNs(r.bounds.injection_s * 1e9).c_str(),
                FormatNs(r.bounds.bisection_s * 1e9).c_str(), r.ratio_to_bound);
  os << line;
  os << "  links: " << r.links.size() << " used, " << FormatBytes(static_cast<double>(r.link_bytes))
     << " crossed them in total\n";
  std::vector<const LinkReport*> order;
  for (const LinkReport& l : r.links) order.push_back(&l);
  std::stable_sort(order.begin(), order.end(),
                   [](const LinkReport* a, const LinkReport* b) { return a->bytes > b->bytes; });
  for (int i = 0; i < top_links && i < static_cast<int>(order.size()); ++i) {
    std::snprintf(line, sizeof(line), "    %-28s %12s in %6lld messages, %5.1f%% busy%s\n",
                  order[i]->name.c_str(), FormatBytes(static_cast<double>(order[i]->bytes)).c_str(),
                  static_cast<long long>(order[i]->messages), 100.0 * order[i]->utilisation,
                  i == 0 ? "  (busiest)" : "");
    os << line;
  }
  if (r.checked) {
    os << "  result: " << (r.ok ? "ok (every rank equals the sequential reference)" : "WRONG: ")
       << (r.ok ? "" : r.mismatch) << "\n";
  } else {
    os << "  result: not checked (phantom buffers)\n";
  }
  std::snprintf(line, sizeof(line), "  simulated %lld events in %.3f s (%.0f events/s)\n",
                static_cast<long long>(r.events), r.wall_s, r.events_per_s);
  os << line;
  return os.str();
}

std::string ResultJson(const SimResult& r, bool with_links) {
  std::ostringstream os;
  char num[64];
  auto d = [&](double v) {
    std::snprintf(num, sizeof(num), "%.6g", v);
    return std::string(num);
  };
  os << "{\"op\": \"" << algo::CollectiveName(r.spec.collective) << "\", \"algo\": \""
     << algo::AlgorithmName(r.spec.algorithm) << "\", \"ranks\": " << r.spec.world_size
     << ", \"count\": " << r.spec.count << ", \"dtype\": \"" << DataTypeName(r.spec.dtype)
     << "\", \"topology\": \"" << JsonEscape(r.topology) << "\", \"mapping\": \""
     << JsonEscape(r.mapping) << "\", \"byte_scale\": " << r.byte_scale
     << ", \"phantom\": " << (r.phantom ? "true" : "false") << ", \"bytes\": " << r.bytes
     << ", \"time_ns\": " << r.time_ns << ", \"algbw_GBps\": " << d(r.algbw_GBps)
     << ", \"busbw_GBps\": " << d(r.busbw_GBps) << ", \"steps\": " << r.steps
     << ", \"messages\": " << r.messages << ", \"mean_hops\": " << d(r.mean_hops)
     << ", \"max_hops\": " << r.max_hops << ", \"links_used\": " << r.links.size()
     << ", \"link_bytes\": " << r.link_bytes;
  if (r.busiest >= 0) {
    const LinkReport& b = r.links[r.busiest];
    os << ", \"busiest_link\": {\"name\": \"" << JsonEscape(b.name) << "\", \"bytes\": " << b.bytes
       << ", \"messages\": " << b.messages << ", \"utilisation\": " << d(b.utilisation) << "}";
  }
  os << ", \"lower_bound_ns\": " << d(r.bounds.Max() * 1e9) << ", \"bound\": \""
     << BoundName(r.bounds) << "\", \"latency_bound_ns\": " << d(r.bounds.latency_s * 1e9)
     << ", \"injection_bound_ns\": " << d(r.bounds.injection_s * 1e9)
     << ", \"bisection_bound_ns\": " << d(r.bounds.bisection_s * 1e9)
     << ", \"ratio_to_bound\": " << d(r.ratio_to_bound);
  if (r.checked) {
    os << ", \"ok\": " << (r.ok ? "true" : "false");
    if (!r.ok) os << ", \"mismatch\": \"" << JsonEscape(r.mismatch) << "\"";
  }
  os << ", \"events\": " << r.events << ", \"wall_s\": " << d(r.wall_s)
     << ", \"events_per_s\": " << d(r.events_per_s);
  if (with_links) {
    os << ", \"links\": [";
    for (size_t i = 0; i < r.links.size(); ++i) {
      const LinkReport& l = r.links[i];
      os << (i ? ", " : "") << "{\"name\": \"" << JsonEscape(l.name) << "\", \"bytes\": " << l.bytes
         << ", \"messages\": " << l.messages << ", \"utilisation\": " << d(l.utilisation) << "}";
    }
    os << "]";
  }
  os << "}";
  return os.str();
}

}  // namespace gyre::sim
