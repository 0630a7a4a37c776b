// gyre-sim: runs gyre's own schedules on a modelled network (see docs/simulator.md).
//   gyre-sim --topology torus2d:4x4 --mapping snake --ranks 16 --algo ring --bytes 64M
//   gyre-sim --ranks 1024 --algo ring --bytes 64M --phantom
//   gyre-sim --study topology
//   gyre-sim --measure_calibration calib.json && gyre-sim --calibrate calib.json
#include <gflags/gflags.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <new>
#include <string>

#include "core/algo/collective.h"
#include "core/algo/select.h"
#include "core/base/clock.h"
#include "core/base/stdout_check.h"
#include "core/base/tool_flags.h"
#include "core/sim/mapping.h"
#include "core/sim/simulator.h"
#include "core/sim/study.h"

DEFINE_string(study, "", "print a study instead of one run: 'topology'");
DEFINE_string(calibrate, "",
              "calibration file (alpha, bandwidth, reduce rate): predict gyre's loopback "
              "allreduce for p = 2, 4, 8 and compare with measured runs");
DEFINE_string(measure_calibration, "",
              "measure alpha, bandwidth and reduce rate on this machine and write them here");

DEFINE_string(op, "allreduce", "collective");
DEFINE_string(algo, "auto", "algorithm name, or auto");
DEFINE_int32(ranks, 16, "world size (1 to 4096)");
DEFINE_string(bytes, "64M",
              "size of `count` elements (K, M, G = KiB, MiB, GiB), run as whole elements, at "
              "least one");
DEFINE_int64(count, -1, "element count (overrides --bytes)");
DEFINE_string(dtype, "float32", "element type");
DEFINE_string(reduce_op, "sum", "reduction operator");
DEFINE_int32(root, 0, "root of rooted collectives");
DEFINE_int64(segment, 0, "pipelining segment in elements (0 = none)");
DEFINE_int32(grid_rows, 0, "two_d: rows of the grid (0 = most square)");
DEFINE_int32(local_size, 0, "hierarchical: ranks per node (0 = default)");

DEFINE_string(topology, "switch",
              "switch | ring | torus2d:AxB | two_level:NODESxGPUS | fat_tree:LEAVESxDEVICES | bus");
DEFINE_string(mapping, "identity", "identity | snake | random[:SEED] | file:PATH");
DEFINE_string(link, "ici", "preset of switch/ring/torus/fat_tree/bus links: ici nvlink ib_ndr");
DEFINE_double(bandwidth_GBps, -1, "override the link bandwidth (GB/s, 1e9 bytes)");
DEFINE_double(latency_us, -1, "override the link latency (microseconds)");
DEFINE_string(intra, "nvlink", "two_level: preset of the links inside a node");
DEFINE_double(intra_bandwidth_GBps, -1, "two_level: override intra-node bandwidth");
DEFINE_double(intra_latency_us, -1, "two_level: override intra-node latency");
DEFINE_string(inter, "ib_ndr", "two_level: preset of each GPU's NIC");
DEFINE_double(inter_bandwidth_GBps, -1, "two_level: override NIC bandwidth");
DEFINE_double(inter_latency_us, -1, "two_level: override NIC latency");
DEFINE_bool(ideal_switch_receive, true,
            "switch: a port's receive side is unlimited (the cost model's rule)");
DEFINE_int32(spines, 0, "fat_tree: spine switches, at most --ranks (0 = devices per leaf)");

DEFINE_bool(phantom, false, "sizes only: no buffers, no correctness check (scale runs)");
DEFINE_int64(check_elems, 4096,
             "real data: check at most about this many elements and time the rest by a byte "
             "scale factor");
DEFINE_int64(byte_scale, 0,
             "explicit byte scale factor (0 = derived from --check_elems): divides the count "
             "(at most the count), or multiplies it with --phantom");
DEFINE_double(reduce_GBps, 0, "reduction rate per rank (0 = free, as in the cost model)");
DEFINE_int32(verify_max_ranks, 64, "verify the whole schedule up to this many ranks");
DEFINE_bool(json, false, "print JSON (one object per line)");
DEFINE_bool(links, false, "list every link that carried bytes");

namespace {

using gyre::Status;
using gyre::StatusOr;

int Fail(const Status& s) {
  std::fprintf(stderr, "gyre-sim: %s\n", s.ToString().c_str());
  return 2;
}

// The largest world size: the 4096-rank runs docs/simulator.md describes. The ranks alone
// do not bound the cost, the algorithm's steps do: at 4096 ranks a recursive-doubling
// --phantom run takes 1.5 s and 0.9 GB, a --phantom ring allreduce about 25 GB. The
// simulator estimates a run's memory before building it and refuses one that cannot fit
// (sim::EstimateMemory); at 100000 ranks any run would exhaust the machine.
constexpr int kMaxRanks = 4096;
// Sizes stay within what gyre's schedules accept (ranks x count x element size, 2^60 bytes).
constexpr int64_t kMaxBytes = int64_t{1} << 60;

StatusOr<int64_t> ParseSize(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  std::string unit(end);
  double mult = 1;
  if (unit == "" || unit == "B") {
    mult = 1;
  } else if (unit == "K" || unit == "KiB" || unit == "KB") {
    mult = 1024;
  } else if (unit == "M" || unit == "MiB" || unit == "MB") {
    mult = 1024.0 * 1024;
  } else if (unit == "G" || unit == "GiB" || unit == "GB") {
    mult = 1024.0 * 1024 * 1024;
  } else {
    return gyre::InvalidArgumentError("cannot parse size '" + text + "' (e.g. 4096, 64K, 64M)");
  }
  if (end == text.c_str() || !std::isfinite(v) || v < 0) {
    return gyre::InvalidArgumentError("cannot parse size '" + text + "'");
  }
  if (v * mult > static_cast<double>(kMaxBytes)) {
    return gyre::InvalidArgumentError("size '" + text +
                                      "' is too large: sizes stay within 2^60 bytes");
  }
  return static_cast<int64_t>(v * mult);
}

// A rate or time flag: `unset` (the flag's default) keeps the preset; otherwise a finite
// value in [min, max], above min when `above`.
Status CheckNumber(const char* flag, double value, double unset, double min, bool above, double max,
                   const char* rule) {
  if (value == unset) return Status::Ok();
  if (std::isfinite(value) && (above ? value > min : value >= min) && value <= max) {
    return Status::Ok();
  }
  return gyre::InvalidArgumentError(std::string("--") + flag + " " + gyre::FlagValue(value) + ": " +
                                    rule);
}

Status CheckNumericFlags() {
  if (FLAGS_ranks < 1 || FLAGS_ranks > kMaxRanks) {
    return gyre::InvalidArgumentError("--ranks " + std::to_string(FLAGS_ranks) +
                                      ": the world size must be from 1 to " +
                                      std::to_string(kMaxRanks));
  }
  if (FLAGS_count < -1) {
    return gyre::InvalidArgumentError("--count " + std::to_string(FLAGS_count) +
                                      ": want 0 or more elements (or -1: use --bytes)");
  }
  const char* kBandwidth = "want a bandwidth above 0 and at most 1e6 GB/s (or -1: the preset's)";
  const char* kLatency = "want a latency from 0 to 1e9 us (or -1: the preset's)";
  for (Status s : {
           CheckNumber("bandwidth_GBps", FLAGS_bandwidth_GBps, -1, 0, true, 1e6, kBandwidth),
           CheckNumber("intra_bandwidth_GBps", FLAGS_intra_bandwidth_GBps, -1, 0, true, 1e6,
                       kBandwidth),
           CheckNumber("inter_bandwidth_GBps", FLAGS_inter_bandwidth_GBps, -1, 0, true, 1e6,
                       kBandwidth),
           CheckNumber("latency_us", FLAGS_latency_us, -1, 0, false, 1e9, kLatency),
           CheckNumber("intra_latency_us", FLAGS_intra_latency_us, -1, 0, false, 1e9, kLatency),
           CheckNumber("inter_latency_us", FLAGS_inter_latency_us, -1, 0, false, 1e9, kLatency),
           CheckNumber("reduce_GBps", FLAGS_reduce_GBps, 0, 0, true, 1e6,
                       "want a rate above 0 and at most 1e6 GB/s (or 0: free)"),
       }) {
    if (!s.ok()) return s;
  }
  if (FLAGS_byte_scale < 0) {
    return gyre::InvalidArgumentError("--byte_scale " + std::to_string(FLAGS_byte_scale) +
                                      ": want 1 or more (or 0: from --check_elems)");
  }
  if (FLAGS_check_elems < 1) {
    return gyre::InvalidArgumentError("--check_elems " + std::to_string(FLAGS_check_elems) +
                                      ": want at least 1");
  }
  // A fat tree routes through spine (destination mod spines): spines past the devices
  // would carry nothing, and each is a link per leaf, built whether used or not.
  if (FLAGS_spines < 0 || FLAGS_spines > FLAGS_ranks) {
    return gyre::InvalidArgumentError("--spines " + std::to_string(FLAGS_spines) +
                                      ": want 1 to --ranks (" + std::to_string(FLAGS_ranks) +
                                      ") spines, or 0: devices per leaf");
  }
  if (FLAGS_verify_max_ranks < 0) {
    return gyre::InvalidArgumentError("--verify_max_ranks " +
                                      std::to_string(FLAGS_verify_max_ranks) + ": want 0 or more");
  }
  return Status::Ok();
}

StatusOr<gyre::sim::LinkParams> Link(const std::string& preset, double gbps, double us) {
  GYRE_ASSIGN_OR_RETURN(gyre::sim::LinkParams p, gyre::sim::LinkPreset(preset));
  if (gbps > 0) p.bandwidth_bps = static_cast<int64_t>(gbps * 1e9);
  if (us >= 0) p.latency_ns = static_cast<int64_t>(us * 1000 + 0.5);
  return p;
}

// The real element count to check and the byte scale that times it as `count`.
void ChooseScale(int64_t count, int p, int64_t max_elems, int64_t* real, int64_t* scale) {
  if (count <= max_elems) {
    *real = count;
    *scale = 1;
    return;
  }
  int64_t r = max_elems >= p ? max_elems - max_elems % p : max_elems;
  while (r > 1 && count % r != 0) --r;
  *real = std::max<int64_t>(r, 1);
  *scale = count / *real;
}

int RunOne() {
  using namespace gyre;
  using namespace gyre::algo;
  if (Status s = CheckNumericFlags(); !s.ok()) return Fail(s);
  auto collective = ParseCollective(FLAGS_op);
  if (!collective.ok()) return Fail(collective.status());
  auto dtype = ParseDataType(FLAGS_dtype);
  if (!dtype.ok()) return Fail(dtype.status());
  auto rop = ParseReduceOp(FLAGS_reduce_op);
  if (!rop.ok()) return Fail(rop.status());
  CollectiveSpec spec;
  spec.collective = *collective;
  spec.world_size = FLAGS_ranks;
  spec.dtype = *dtype;
  spec.op = *rop;
  spec.root = FLAGS_root;
  spec.segment_elems = FLAGS_segment;
  spec.grid_rows = FLAGS_grid_rows;
  spec.local_size = FLAGS_local_size;
  int64_t count = FLAGS_count;
  std::string size_flag = "--count " + std::to_string(FLAGS_count);
  if (count < 0) {
    auto bytes = ParseSize(FLAGS_bytes);
    if (!bytes.ok()) return Fail(bytes.status().WithContext("--bytes " + FLAGS_bytes));
    // Whole elements, at least one, as gyre-bench runs a size (3 B of float64 used to run
    // as 0 elements without a word); the run says so when that differs from what was asked.
    const int64_t es = static_cast<int64_t>(DataTypeSize(spec.dtype));
    count = *bytes / es;
    if (spec.collective != Collective::kBarrier) {
      count = std::max<int64_t>(1, count);
      if (count * es != *bytes) {
        std::fprintf(FLAGS_json ? stderr : stdout,
                     "# %lld B runs as %lld B (whole %s elements: at least one)\n",
                     static_cast<long long>(*bytes), static_cast<long long>(count * es),
                     DataTypeName(spec.dtype));
      }
    }
    size_flag = "--bytes " + FLAGS_bytes;
  }
  // What is timed is count x byte scale elements on each of the ranks (the scale is only
  // explicit in --phantom runs; otherwise it divides count): it must stay countable.
  const int64_t timed_scale = FLAGS_phantom && FLAGS_byte_scale > 0 ? FLAGS_byte_scale : 1;
  const int64_t elem_bytes = static_cast<int64_t>(DataTypeSize(spec.dtype));
  if (count > kMaxBytes / elem_bytes / FLAGS_ranks / timed_scale) {
    return Fail(InvalidArgumentError(size_flag + " is too large: " + std::to_string(FLAGS_ranks) +
                                     " ranks x count x " + std::to_string(elem_bytes) + " B" +
                                     (timed_scale > 1 ? " x --byte_scale" : "") +
                                     " must stay within 2^60 bytes"));
  }
  // With real data an explicit scale divides the count: a scale above it left 0 elements to
  // run, and a 64 MiB call was "simulated" as an empty one in 0 ns.
  if (FLAGS_byte_scale > count && count > 0 && !FLAGS_phantom &&
      spec.collective != Collective::kBarrier) {
    return Fail(InvalidArgumentError(
        "--byte_scale " + std::to_string(FLAGS_byte_scale) + " is larger than " + size_flag + " (" +
        std::to_string(count) + " elements), which it divides into the elements run: " +
        "want at most " + std::to_string(count) + " (or --phantom, where it multiplies)"));
  }
  if (FLAGS_algo != "auto") {
    auto a = ParseAlgorithm(FLAGS_algo);
    if (!a.ok()) return Fail(a.status());
    spec.algorithm = *a;
  }

  sim::SimOptions o;
  o.topology = FLAGS_topology;
  o.mapping = FLAGS_mapping;
  o.phantom = FLAGS_phantom;
  o.reduce_bytes_per_s = FLAGS_reduce_GBps * 1e9;
  o.verify_max_ranks = FLAGS_verify_max_ranks;
  o.topology_options.ideal_switch_receive = FLAGS_ideal_switch_receive;
  o.topology_options.fat_tree_spines = FLAGS_spines;
  auto link = Link(FLAGS_link, FLAGS_bandwidth_GBps, FLAGS_latency_us);
  auto intra = Link(FLAGS_intra, FLAGS_intra_bandwidth_GBps, FLAGS_intra_latency_us);
  auto inter = Link(FLAGS_inter, FLAGS_inter_bandwidth_GBps, FLAGS_inter_latency_us);
  for (const auto* l : {&link, &intra, &inter}) {
    if (!l->ok()) return Fail(l->status());
  }
  o.topology_options.link = *link;
  o.topology_options.intra = *intra;
  o.topology_options.inter = *inter;
  if (FLAGS_phantom || FLAGS_byte_scale > 0) {
    spec.count = count;
    o.byte_scale = FLAGS_byte_scale > 0 ? FLAGS_byte_scale : 1;
    if (FLAGS_byte_scale > 0 && !FLAGS_phantom)
      spec.count = std::max<int64_t>(count / o.byte_scale, 0);
  } else {
    ChooseScale(count, spec.world_size, FLAGS_check_elems, &spec.count, &o.byte_scale);
  }

  auto topology = sim::MakeTopology(o.topology, spec.world_size, o.topology_options);
  if (!topology.ok()) {
    return Fail(topology.status().WithContext(
        "--topology " + FLAGS_topology +
        (FLAGS_spines > 0 ? " --spines " + std::to_string(FLAGS_spines) : "")));
  }
  auto mapping = sim::MakeMapping(o.mapping, **topology);
  if (!mapping.ok()) return Fail(mapping.status().WithContext("--mapping " + FLAGS_mapping));
  auto result = sim::SimulateOn(spec, **topology, *mapping, o);
  if (!result.ok()) return Fail(result.status());
  result->mapping = o.mapping;
  const sim::HopStats ring = sim::RingHops(**topology, *mapping);
  if (FLAGS_json) {
    std::cout << sim::ResultJson(*result, FLAGS_links) << "\n";
  } else {
    std::cout << sim::FormatResult(*result, FLAGS_links ? 1 << 30 : 3);
    std::printf(
        "  mapping %s: logical ring neighbours are %.2f links apart on average, %d at "
        "most\n",
        o.mapping.c_str(), ring.mean, ring.max);
  }
  return result->ok ? 0 : 1;
}

int Run(int argc, char** argv) {
  using namespace gyre;
  if (argc > 1) {
    return Fail(InvalidArgumentError(std::string("unexpected argument '") + argv[1] +
                                     "': gyre-sim takes flags only"));
  }
  if (!FLAGS_measure_calibration.empty()) {
    auto c = sim::MeasureCalibration();
    if (!c.ok()) return Fail(c.status());
    Status s = sim::WriteCalibration(FLAGS_measure_calibration, *c);
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s: alpha %.2f us, %.2f GB/s per copy, reduce %.2f GB/s, %d cores\n",
                FLAGS_measure_calibration.c_str(), c->alpha_s * 1e6, c->bandwidth_Bps / 1e9,
                c->reduce_Bps / 1e9, c->cores);
    if (FLAGS_calibrate.empty()) return 0;
  }
  if (!FLAGS_calibrate.empty()) {
    auto c = sim::ReadCalibration(FLAGS_calibrate);
    if (!c.ok()) return Fail(c.status());
    Status s = sim::RunCalibration(*c, std::cout, FLAGS_json);
    return s.ok() ? 0 : Fail(s);
  }
  if (FLAGS_study == "topology") {
    Status s = sim::RunTopologyStudy(std::cout, FLAGS_json);
    return s.ok() ? 0 : Fail(s);
  }
  if (!FLAGS_study.empty()) {
    return Fail(InvalidArgumentError("unknown study '" + FLAGS_study + "' (known: topology)"));
  }
  return RunOne();
}

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(
      &argc, &argv,
      "gyre-sim [flags]: run gyre's schedules on a modelled network (docs/simulator.md)");
  int code = 0;
  try {
    code = Run(argc, argv);
  } catch (const std::bad_alloc&) {
    // A run the estimate let through that still did not fit: an error and an exit status,
    // not an abort.
    code = Fail(gyre::ResourceExhaustedError(
        "out of memory (std::bad_alloc) part way through the run, beyond its estimate up "
        "front: give fewer ranks or an algorithm of fewer steps (recursive_doubling, tree)"));
  }
  return gyre::ExitCodeAfterFlushingStdout("gyre-sim", code);
}
