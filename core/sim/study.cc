#include "core/sim/study.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "core/algo/model_select.h"
#include "core/algo/select.h"
#include "core/base/dtype.h"
#include "core/base/file_io.h"
#include "core/base/thread.h"
#include "core/comm/communicator.h"
#include "core/transport/loopback.h"

namespace gyre::sim {
namespace {

using algo::Algorithm;
using algo::Collective;
using algo::CollectiveSpec;

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

// Real elements to check and the byte scale that makes them time as `bytes`: at most
// `max_elems` float32 elements, a divisor of the whole so the scale is exact.
struct Scaled {
  int64_t count;
  int64_t scale;
};
Scaled ScaleFor(int64_t bytes, int64_t max_elems) {
  int64_t count = std::max<int64_t>(1, std::min(bytes / 4, max_elems));
  while (count > 1 && bytes % (count * 4) != 0) --count;
  return Scaled{count, std::max<int64_t>(1, bytes / (count * 4))};
}

CollectiveSpec Allreduce(int p, int64_t count, Algorithm a) {
  CollectiveSpec s;
  s.collective = Collective::kAllreduce;
  s.algorithm = a;
  s.world_size = p;
  s.count = count;
  s.dtype = DataType::kFloat32;
  s.op = ReduceOp::kSum;
  return s;
}

StatusOr<SimResult> RunOne(const CollectiveSpec& spec, const std::string& topology,
                           const std::string& mapping, const TopologyOptions& topo, int64_t scale) {
  SimOptions o;
  o.topology = topology;
  o.topology_options = topo;
  o.mapping = mapping;
  o.byte_scale = scale;
  auto r = Simulate(spec, o);
  if (!r.ok()) return r.status().WithContext(spec.ToString() + " on " + topology);
  return r;
}

std::string Ms(double s) { return FormatNs(s * 1e9); }

std::string Fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string Fmt(const char* format, ...) {
  char buf[2048];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

// "  -> " then `text` wrapped at 100 columns under it, and a blank line.
std::string Sentence(const std::string& text) {
  std::string out = "  ->";
  size_t col = out.size();
  std::istringstream words(text);
  std::string word;
  while (words >> word) {
    if (col + 1 + word.size() > 100) {
      out += "\n     ";
      col = 5;
    } else {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
  }
  return out + "\n\n";
}

}  // namespace

StatusOr<std::vector<MappingRow>> MappingStudy(int64_t bytes) {
  const int p = 16;
  TopologyOptions topo;
  topo.link = LinkParams{45'000'000'000, 1000};
  const Scaled sc = ScaleFor(bytes, 4096);
  struct Case {
    std::string topology;
    std::string mapping;
    Algorithm algorithm;
  };
  const Case cases[] = {
      {"switch", "identity", Algorithm::kRing},      {"ring", "identity", Algorithm::kRing},
      {"torus2d:4x4", "snake", Algorithm::kRing},    {"torus2d:4x4", "row_major", Algorithm::kRing},
      {"torus2d:4x4", "random:7", Algorithm::kRing}, {"torus2d:4x4", "row_major", Algorithm::kTwoD},
  };
  std::vector<MappingRow> rows;
  for (const Case& c : cases) {
    CollectiveSpec spec = Allreduce(p, sc.count, c.algorithm);
    if (c.algorithm == Algorithm::kTwoD) spec.grid_rows = 4;
    GYRE_ASSIGN_OR_RETURN(SimResult r, RunOne(spec, c.topology, c.mapping, topo, sc.scale));
    MappingRow row;
    row.topology = c.topology;
    row.mapping = c.mapping;
    row.result = std::move(r);
    row.ideal_s = 2.0 * (p - 1) / p * static_cast<double>(bytes) /
                  static_cast<double>(topo.link.bandwidth_bps);
    rows.push_back(std::move(row));
  }
  return rows;
}

StatusOr<std::vector<AlltoallRow>> AlltoallStudy(int64_t bytes_per_device) {
  TopologyOptions topo;
  topo.link = LinkParams{45'000'000'000, 1000};
  std::vector<AlltoallRow> rows;
  for (int p : {16, 64}) {
    const int side = p == 16 ? 4 : 8;
    const std::string torus = "torus2d:" + std::to_string(side) + "x" + std::to_string(side);
    const Scaled sc = ScaleFor(bytes_per_device / p, 64);
    CollectiveSpec spec;
    spec.collective = Collective::kAlltoall;
    spec.algorithm = Algorithm::kPairwise;
    spec.world_size = p;
    spec.count = sc.count;
    spec.dtype = DataType::kFloat32;
    for (const std::string& t : {std::string("switch"), std::string("ring"), torus}) {
      GYRE_ASSIGN_OR_RETURN(SimResult r, RunOne(spec, t, "identity", topo, sc.scale));
      rows.push_back(AlltoallRow{p, t, std::move(r)});
    }
  }
  return rows;
}

StatusOr<std::vector<TwoLevelRow>> TwoLevelStudy() {
  TopologyOptions topo;
  topo.intra = LinkParams{450'000'000'000, 1000};
  topo.inter = LinkParams{50'000'000'000, 4000};
  const int gpus = 8;
  std::vector<TwoLevelRow> rows;
  for (int64_t bytes : {1 * kMiB, 256 * kMiB}) {
    for (int nodes : {2, 4, 8}) {
      const int p = nodes * gpus;
      const Scaled sc = ScaleFor(bytes, 64 * p);
      const std::string t = "two_level:" + std::to_string(nodes) + "x" + std::to_string(gpus);
      TwoLevelRow row;
      row.nodes = nodes;
      row.bytes = bytes;
      GYRE_ASSIGN_OR_RETURN(row.ring, RunOne(Allreduce(p, sc.count, Algorithm::kRing), t,
                                             "identity", topo, sc.scale));
      CollectiveSpec h = Allreduce(p, sc.count, Algorithm::kHierarchical);
      h.local_size = gpus;
      GYRE_ASSIGN_OR_RETURN(row.hierarchical, RunOne(h, t, "identity", topo, sc.scale));
      row.ideal_inter_s = 2.0 * (nodes - 1) / nodes * (static_cast<double>(bytes) / gpus) /
                          static_cast<double>(topo.inter.bandwidth_bps);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

namespace {

const SimResult* FindRow(const std::vector<MappingRow>& rows, const std::string& topology,
                         const std::string& mapping, Algorithm a) {
  for (const MappingRow& r : rows) {
    if (r.topology == topology && r.mapping == mapping && r.result.spec.algorithm == a) {
      return &r.result;
    }
  }
  return nullptr;
}

void PrintMapping(std::ostream& out, int64_t bytes, const std::vector<MappingRow>& rows) {
  out << "Ring allreduce of " << FormatBytes(static_cast<double>(bytes))
      << " on 16 devices, every link 45 GB/s and 1 us (single-ring ideal "
      << Ms(rows.front().ideal_s) << ")\n";
  out << Fmt("  %-12s %-10s %-6s %9s %8s %11s %9s %4s\n", "topology", "mapping", "algo",
             "hops mean", "hops max", "time", "ratio", "ok");
  for (const MappingRow& r : rows) {
    const SimResult& s = r.result;
    out << Fmt("  %-12s %-10s %-6s %9.2f %8d %11s %9.2f %4s\n", r.topology.c_str(),
               r.mapping.c_str(), algo::AlgorithmName(s.spec.algorithm), s.mean_hops, s.max_hops,
               FormatNs(static_cast<double>(s.time_ns)).c_str(),
               static_cast<double>(s.time_ns) * 1e-9 / r.ideal_s, s.ok ? "yes" : "NO");
  }
  const SimResult* snake = FindRow(rows, "torus2d:4x4", "snake", Algorithm::kRing);
  const SimResult* row_major = FindRow(rows, "torus2d:4x4", "row_major", Algorithm::kRing);
  const SimResult* random = FindRow(rows, "torus2d:4x4", "random:7", Algorithm::kRing);
  const SimResult* two_d = FindRow(rows, "torus2d:4x4", "row_major", Algorithm::kTwoD);
  if (snake && row_major && random && two_d) {
    const double t_snake = static_cast<double>(snake->time_ns);
    auto busiest_bytes = [](const SimResult* r) {
      return r->busiest >= 0 ? r->links[r->busiest].bytes : 0;
    };
    auto how = [&](const SimResult* r) {
      return busiest_bytes(r) > busiest_bytes(snake) ? "share links"
                                                     : "use links nothing else needs";
    };
    const bool latency_bound =
        static_cast<double>(snake->time_ns) * 1e-9 > 2 * rows.front().ideal_s;
    out << Sentence(
        Fmt("Hops are links per message (a switch route is two: up and down). The snake keeps "
            "every ring neighbour one link away, like the physical ring. Row-major's longer routes "
            "(%.2f links a message) %s and random's (%.2f) %s: they take %.2fx and %.2fx the "
            "snake's time. The 2-D allreduce runs %lld steps instead of %lld and takes %.2fx%s.",
            row_major->mean_hops, how(row_major), random->mean_hops, how(random),
            static_cast<double>(row_major->time_ns) / t_snake,
            static_cast<double>(random->time_ns) / t_snake, static_cast<long long>(two_d->steps),
            static_cast<long long>(snake->steps), static_cast<double>(two_d->time_ns) / t_snake,
            latency_bound ? " (at this size every step's latency counts)"
                          : " (the same bytes per link, fewer latencies)"));
  }
}

void PrintAlltoall(std::ostream& out, int64_t bytes, const std::vector<AlltoallRow>& rows) {
  out << "Pairwise all-to-all, " << FormatBytes(static_cast<double>(bytes))
      << " per device, 45 GB/s and 1 us links\n";
  out << Fmt("  %-4s %-12s %11s %11s %11s %7s  %-26s %4s\n", "p", "topology", "time", "bisection",
             "injection", "ratio", "busiest link", "ok");
  for (const AlltoallRow& r : rows) {
    const SimResult& s = r.result;
    const std::string busiest = s.busiest >= 0
                                    ? s.links[s.busiest].name + " " +
                                          FormatBytes(static_cast<double>(s.links[s.busiest].bytes))
                                    : "-";
    out << Fmt("  %-4d %-12s %11s %11s %11s %7.2f  %-26s %4s\n", r.ranks, r.topology.c_str(),
               FormatNs(static_cast<double>(s.time_ns)).c_str(), Ms(s.bounds.bisection_s).c_str(),
               Ms(s.bounds.injection_s).c_str(), s.ratio_to_bound, busiest.c_str(),
               s.ok ? "yes" : "NO");
  }
  auto ratios = [&](const std::string& kind) {
    std::string list;
    for (const AlltoallRow& r : rows) {
      if (r.topology.rfind(kind, 0) == 0) {
        list += (list.empty() ? "" : ", ") + Fmt("%.2f", r.result.ratio_to_bound);
      }
    }
    return list;
  };
  out << Sentence(
      Fmt("Each time sits on its busiest link: the switch is injection-bound (ratio %s), the "
          "ring bisection-bound with only two links across its cut (%s), and the torus, with 4 "
          "ports per device, stays above its bisection bound (%s) because dimension-order routing "
          "sends every half-way message the '+' way, loading + links more than - links.",
          ratios("switch").c_str(), ratios("ring").c_str(), ratios("torus").c_str()));
}

void PrintTwoLevel(std::ostream& out, const std::vector<TwoLevelRow>& rows) {
  out << "Flat ring vs hierarchical allreduce on NODES x 8 GPUs (NVLink 450 GB/s in a node, "
         "a 50 GB/s NIC per GPU)\n";
  out << Fmt("  %-5s %-8s %11s %13s %8s %15s %11s %4s\n", "nodes", "size", "ring", "hierarchical",
             "speedup", "ideal inter", "hier/ideal", "ok");
  double min_small = 1e300, max_small = 0, min_large = 1e300, max_large = 0;
  for (const TwoLevelRow& r : rows) {
    const double ring = static_cast<double>(r.ring.time_ns);
    const double hier = static_cast<double>(r.hierarchical.time_ns);
    const double speedup = ring / hier;
    if (r.bytes < 16 * kMiB) {
      min_small = std::min(min_small, speedup);
      max_small = std::max(max_small, speedup);
    } else {
      min_large = std::min(min_large, speedup);
      max_large = std::max(max_large, speedup);
    }
    out << Fmt("  %-5d %-8s %11s %13s %7.2fx %15s %11.2f %4s\n", r.nodes,
               FormatBytes(static_cast<double>(r.bytes)).c_str(), FormatNs(ring).c_str(),
               FormatNs(hier).c_str(), speedup, Ms(r.ideal_inter_s).c_str(),
               hier * 1e-9 / r.ideal_inter_s, r.ring.ok && r.hierarchical.ok ? "yes" : "NO");
  }
  double hier_over_ideal = 0;
  for (const TwoLevelRow& r : rows) {
    if (r.bytes >= 16 * kMiB) {
      hier_over_ideal = std::max(
          hier_over_ideal, static_cast<double>(r.hierarchical.time_ns) * 1e-9 / r.ideal_inter_s);
    }
  }
  out << Sentence(Fmt(
      "At 1 MiB the hierarchical allreduce wins %.1f-%.1fx by running 2(G-1)+2(N-1) steps "
      "instead of 2(NG-1); at 256 MiB the flat ring is held to one NIC per node boundary while "
      "the hierarchical one spreads each node's traffic over all 8 NICs and wins %.1f-%.1fx. It "
      "stays up to %.1fx above the ideal inter-node time because its NVLink reduce-scatter and "
      "allgather run before and after the inter-node phase instead of overlapping it.",
      min_small, max_small, min_large, max_large, hier_over_ideal));
}

}  // namespace

Status RunTopologyStudy(std::ostream& out, bool json) {
  std::vector<SimResult> all;
  for (int64_t bytes : {64 * kMiB, 64 * kKiB}) {
    GYRE_ASSIGN_OR_RETURN(std::vector<MappingRow> rows, MappingStudy(bytes));
    PrintMapping(out, bytes, rows);
    for (const MappingRow& r : rows) all.push_back(r.result);
  }
  GYRE_ASSIGN_OR_RETURN(std::vector<AlltoallRow> a2a, AlltoallStudy(16 * kMiB));
  PrintAlltoall(out, 16 * kMiB, a2a);
  for (const AlltoallRow& r : a2a) all.push_back(r.result);
  GYRE_ASSIGN_OR_RETURN(std::vector<TwoLevelRow> two, TwoLevelStudy());
  PrintTwoLevel(out, two);
  for (const TwoLevelRow& r : two) {
    all.push_back(r.ring);
    all.push_back(r.hierarchical);
  }
  if (json) {
    for (const SimResult& r : all) out << ResultJson(r) << "\n";
  }
  for (const SimResult& r : all) {
    if (!r.ok) return InternalError("a study run computed a wrong result: " + r.mismatch);
  }
  return Status::Ok();
}

// ---- calibration ----

namespace {

bool FindNumber(const std::string& text, const std::string& key, double* value) {
  size_t pos = 0;
  while ((pos = text.find(key, pos)) != std::string::npos) {
    const size_t after = pos + key.size();
    const bool starts = pos == 0 || !(std::isalnum(static_cast<unsigned char>(text[pos - 1])) ||
                                      text[pos - 1] == '_');
    const bool ends =
        after >= text.size() ||
        !(std::isalnum(static_cast<unsigned char>(text[after])) || text[after] == '_');
    pos = after;
    if (!starts || !ends) continue;
    size_t i = after;
    while (i < text.size() && (text[i] == '"' || text[i] == '\'' || text[i] == ':' ||
                               text[i] == '=' || text[i] == ' ' || text[i] == '\t')) {
      ++i;
    }
    char* end = nullptr;
    const double v = std::strtod(text.c_str() + i, &end);
    if (end == text.c_str() + i) continue;
    *value = v;
    return true;
  }
  return false;
}

// Median over iterations of the slowest rank's time of `call` on p loopback ranks.
StatusOr<double> MeasureLoopback(int p, int iterations,
                                 const std::function<Status(Communicator&, int)>& call) {
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : LoopbackHub::CreateWorld(p)) {
    comms.push_back(std::make_unique<Communicator>(std::move(t)));
  }
  std::vector<std::vector<double>> times(p, std::vector<double>(iterations, 0));
  std::vector<Status> status(p);
  std::vector<std::thread> threads;
  Status unstarted;
  for (int r = 0; r < p && unstarted.ok(); ++r) {
    std::thread t;
    unstarted = StartThread(&t, "loopback rank " + std::to_string(r), "its measurement", [&, r] {
      const Clock& clock = *SteadyClock::Get();
      for (int i = 0; i < iterations && status[r].ok(); ++i) {
        status[r] = comms[r]->Barrier();
        if (!status[r].ok()) break;
        const TimePoint t0 = clock.Now();
        status[r] = call(*comms[r], r);
        times[r][i] = std::chrono::duration<double>(clock.Now() - t0).count();
      }
    });
    if (unstarted.ok()) threads.push_back(std::move(t));
  }
  // A rank without a thread never calls: the others, waiting for it, are stopped.
  if (!unstarted.ok()) {
    for (auto& c : comms) c->transport()->Shutdown();
  }
  for (auto& t : threads) t.join();
  if (!unstarted.ok()) return unstarted;
  for (int r = 0; r < p; ++r) {
    if (!status[r].ok()) return status[r].WithContext("loopback rank " + std::to_string(r));
  }
  std::vector<double> slowest(iterations, 0);
  for (int i = 0; i < iterations; ++i) {
    for (int r = 0; r < p; ++r) slowest[i] = std::max(slowest[i], times[r][i]);
  }
  std::sort(slowest.begin(), slowest.end());
  return slowest[iterations / 2];
}

}  // namespace

StatusOr<Calibration> ReadCalibration(const std::string& path) {
  // A few numbers: a path that names /dev/zero or a huge file must not take the host's memory.
  GYRE_ASSIGN_OR_RETURN(const std::string text,
                        ReadSmallFile(path, algo::kMaxCalibrationFileBytes, "calibration file"));
  Calibration c;
  double v = 0;
  // gyre-machine-limits --json names its numbers differently; its memcpy rate and one-way
  // ping-pong latency stand in for a copy and a message.
  if (FindNumber(text, "alpha_us", &v) || FindNumber(text, "pingpong_4B_oneway_us", &v)) {
    c.alpha_s = v * 1e-6;
  } else if (FindNumber(text, "alpha_s", &v)) {
    c.alpha_s = v;
  } else {
    return InvalidArgumentError("calibration file '" + path + "' has no alpha_us or alpha_s");
  }
  if ((FindNumber(text, "bandwidth_GBps", &v) || FindNumber(text, "memcpy_GBps", &v)) && v > 0) {
    c.bandwidth_Bps = v * 1e9;
  } else if (FindNumber(text, "beta_s_per_byte", &v) && v > 0) {
    c.bandwidth_Bps = 1 / v;
  } else {
    return InvalidArgumentError("calibration file '" + path +
                                "' has no positive bandwidth_GBps or beta_s_per_byte");
  }
  if (FindNumber(text, "reduce_GBps", &v) || FindNumber(text, "reduce_f32_gyre_GBps", &v)) {
    c.reduce_Bps = v * 1e9;
  }
  if (FindNumber(text, "cores", &v) && v >= 1) c.cores = static_cast<int>(v);
  if (c.alpha_s < 0 || c.reduce_Bps < 0) {
    return InvalidArgumentError("calibration file '" + path + "' has a negative value");
  }
  return c;
}

Status WriteCalibration(const std::string& path, const Calibration& c) {
  std::ofstream out(path);
  if (!out) return InvalidArgumentError("cannot write calibration file '" + path + "'");
  out << Fmt(
      "{\"alpha_us\": %.3f, \"bandwidth_GBps\": %.3f, \"reduce_GBps\": %.3f, "
      "\"cores\": %d}\n",
      c.alpha_s * 1e6, c.bandwidth_Bps / 1e9, c.reduce_Bps / 1e9, c.cores);
  if (!out) return InvalidArgumentError("writing calibration file '" + path + "' failed");
  return Status::Ok();
}

StatusOr<Calibration> MeasureCalibration() {
  Calibration c;
  c.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::vector<float>> bufs(2, std::vector<float>(kMiB, 1.0f));
  std::vector<std::vector<float>> outs(2, std::vector<float>(1, 0.0f));
  // alpha: a 2-rank allreduce of one element is one exchange, with the executor's work on
  // both sides, as every step of a larger allreduce has.
  GYRE_ASSIGN_OR_RETURN(const double small, MeasureLoopback(2, 301, [&](Communicator& comm, int r) {
                          return comm.Allreduce(bufs[r].data(), outs[r].data(), 1,
                                                DataType::kFloat32, ReduceOp::kSum);
                        }));
  // beta: one 1 MiB message, large enough that the copy dominates and small enough to stay
  // in cache, like most chunks of the calibrated allreduces.
  GYRE_ASSIGN_OR_RETURN(const double large, MeasureLoopback(2, 31, [&](Communicator& comm, int r) {
                          return comm.Broadcast(bufs[r].data(), bufs[r].data(), kMiB / 4,
                                                DataType::kFloat32, 0);
                        }));
  c.alpha_s = small;
  c.bandwidth_Bps = static_cast<double>(kMiB) / std::max(large - small, 1e-9);
  auto fn = GetReduceFn(DataType::kFloat32, ReduceOp::kSum);
  if (!fn.ok()) return fn.status();
  std::vector<float> a(4 * kMiB, 1.0f), b(4 * kMiB, 2.0f);
  const Clock& clock = *SteadyClock::Get();
  std::vector<double> runs;
  for (int i = 0; i < 7; ++i) {
    const TimePoint t0 = clock.Now();
    (*fn)(a.data(), b.data(), a.size());
    runs.push_back(std::chrono::duration<double>(clock.Now() - t0).count());
  }
  std::sort(runs.begin(), runs.end());
  c.reduce_Bps = static_cast<double>(a.size() * sizeof(float)) / std::max(runs[3], 1e-9);
  return c;
}

StatusOr<std::vector<CalibrationRow>> CalibrationStudy(const Calibration& c) {
  std::vector<CalibrationRow> rows;
  for (int p : {2, 4, 8}) {
    for (int64_t bytes : {1 * kKiB, 1 * kMiB, 16 * kMiB}) {
      CollectiveSpec spec = Allreduce(p, bytes / 4, Algorithm::kAuto);
      spec.algorithm = algo::SelectAlgorithm(spec);
      // The ranks are threads sharing `cores` CPUs: with more ranks than cores each gets
      // cores/p of one, for its per-message work (alpha) and its reductions alike. Copies
      // are serialised by the loopback hub's lock, which the bus models.
      const double share = std::min(1.0, static_cast<double>(c.cores) / p);
      SimOptions o;
      o.topology = "bus";
      o.topology_options.link = LinkParams{static_cast<int64_t>(c.bandwidth_Bps),
                                           static_cast<int64_t>(c.alpha_s / share * 1e9)};
      o.phantom = true;
      o.reduce_bytes_per_s = c.reduce_Bps * share;
      GYRE_ASSIGN_OR_RETURN(SimResult sim, Simulate(spec, o));
      const int iterations = bytes >= 16 * kMiB ? 5 : (bytes >= kMiB ? 15 : 100);
      std::vector<std::vector<float>> in(p), out(p);
      for (int r = 0; r < p; ++r) {
        in[r].assign(static_cast<size_t>(bytes / 4), static_cast<float>(r));
        out[r].assign(static_cast<size_t>(bytes / 4), 0.0f);
      }
      GYRE_ASSIGN_OR_RETURN(const double measured,
                            MeasureLoopback(p, iterations, [&](Communicator& comm, int r) {
                              CallOptions opts;
                              opts.algorithm = spec.algorithm;
                              return comm.Allreduce(in[r].data(), out[r].data(), bytes / 4,
                                                    DataType::kFloat32, ReduceOp::kSum, opts);
                            }));
      CalibrationRow row;
      row.ranks = p;
      row.bytes = bytes;
      row.algorithm = algo::AlgorithmName(spec.algorithm);
      row.predicted_s = static_cast<double>(sim.time_ns) * 1e-9;
      row.measured_s = measured;
      row.error = (row.predicted_s - measured) / measured;
      rows.push_back(row);
    }
  }
  return rows;
}

Status RunCalibration(const Calibration& c, std::ostream& out, bool json) {
  out << Fmt("Calibration: alpha %s, %.2f GB/s per copy, reduce %.2f GB/s, %d cores\n",
             Ms(c.alpha_s).c_str(), c.bandwidth_Bps / 1e9, c.reduce_Bps / 1e9, c.cores);
  GYRE_ASSIGN_OR_RETURN(std::vector<CalibrationRow> rows, CalibrationStudy(c));
  double load = 0;
  std::ifstream("/proc/loadavg") >> load;
  out << Fmt("  %-3s %-8s %-19s %11s %11s %8s\n", "p", "size", "algorithm", "predicted", "measured",
             "error");
  int within = 0;
  const CalibrationRow* worst = nullptr;
  for (const CalibrationRow& r : rows) {
    out << Fmt("  %-3d %-8s %-19s %11s %11s %+7.0f%%\n", r.ranks,
               FormatBytes(static_cast<double>(r.bytes)).c_str(), r.algorithm.c_str(),
               Ms(r.predicted_s).c_str(), Ms(r.measured_s).c_str(), 100 * r.error);
    if (std::fabs(r.error) <= 0.25) ++within;
    if (worst == nullptr || std::fabs(r.error) > std::fabs(worst->error)) worst = &r;
    if (json) {
      out << Fmt(
          "{\"ranks\": %d, \"bytes\": %lld, \"algo\": \"%s\", \"predicted_us\": %.2f, "
          "\"measured_us\": %.2f, \"error\": %.4f}\n",
          r.ranks, static_cast<long long>(r.bytes), r.algorithm.c_str(), r.predicted_s * 1e6,
          r.measured_s * 1e6, r.error);
    }
  }
  out << Sentence(
      Fmt("%d of %zu predictions within 25%% (load average %.1f on %d cores while measuring); "
          "the worst is p=%d at %s (%+.0f%%). The model copies one payload at a time (the "
          "loopback hub's lock) at the rate of a 1 MiB copy and gives each of p threads cores/p "
          "of a CPU for its per-message work and its reductions. It does not see that copies of "
          "several MiB fall out of cache and run slower, nor how long a sleeping thread takes to "
          "wake up while other threads or other jobs hold the cores: the misses come from there.",
          within, rows.size(), load, c.cores, worst->ranks,
          FormatBytes(static_cast<double>(worst->bytes)).c_str(), 100 * worst->error));
  return Status::Ok();
}

}  // namespace gyre::sim
