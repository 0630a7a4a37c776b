// gyre-schedule: prints a collective's schedule, its verification verdict and its cost, so
// a person can read what every rank will do before anything runs.
//   gyre-schedule --op allreduce --algo ring -p 4 --count 12
#include <gflags/gflags.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <set>
#include <string>

#include "core/algo/builders.h"
#include "core/algo/cost.h"
#include "core/algo/formulas.h"
#include "core/algo/select.h"
#include "core/algo/verifier.h"
#include "core/base/clock.h"
#include "core/base/stdout_check.h"
#include "core/base/tool_flags.h"

DEFINE_string(op, "allreduce",
              "collective: allreduce broadcast reduce allgather reduce_scatter "
              "alltoall gather scatter barrier");
DEFINE_string(algo, "auto", "algorithm name, or auto");
DEFINE_int32(p, 4, "world size (1 to 2048)");
DEFINE_int64(count, 12, "element count (see docs/algorithms.md for each collective's convention)");
DEFINE_string(dtype, "float32", "element type");
DEFINE_string(reduce_op, "sum", "reduction operator");
DEFINE_int32(root, 0, "root rank of rooted collectives");
DEFINE_int64(segment, 0, "pipelining segment in elements (0 = none)");
DEFINE_bool(deterministic, false, "canonical reduction order");
DEFINE_int32(rank, -1, "print only this rank's steps (-1 = all)");
DEFINE_double(alpha_us, 10, "cost model: latency per message, microseconds");
DEFINE_double(gbps, 5, "cost model: bandwidth, GB/s");

namespace {

// The largest world size: every rank's steps are built, verified and printed, and the
// cost grows faster than the ranks (the default allreduce: 2048 ranks take 2 s and 270 MB,
// 4096 ranks 7 s and 1 GB, 100000 ranks passed 4.7 GB in 20 s).
constexpr int kMaxRanks = 2048;
constexpr int64_t kMaxSteps = int64_t{1} << 20;
constexpr int64_t kStepBytes = 1100;
constexpr int64_t kMaxSegments = int64_t{1} << 20;

int Run(int argc, char** argv) {
  using namespace gyre;
  using namespace gyre::algo;
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "gyre-schedule: %s\n", s.ToString().c_str());
    return 2;
  };
  if (argc > 1) {
    return fail(InvalidArgumentError(std::string("unexpected argument '") + argv[1] +
                                     "': gyre-schedule takes flags only"));
  }
  if (FLAGS_p < 1 || FLAGS_p > kMaxRanks) {
    return fail(InvalidArgumentError("-p " + std::to_string(FLAGS_p) +
                                     ": the world size must be from 1 to " +
                                     std::to_string(kMaxRanks)));
  }
  // The cost model's inputs: a time that is not a finite number turns every estimate into
  // inf, nan or a negative time.
  if (!(std::isfinite(FLAGS_alpha_us) && FLAGS_alpha_us >= 0 && FLAGS_alpha_us <= 1e9)) {
    return fail(InvalidArgumentError("--alpha_us " + gyre::FlagValue(FLAGS_alpha_us) +
                                     ": want a latency from 0 to 1e9 microseconds"));
  }
  if (!(std::isfinite(FLAGS_gbps) && FLAGS_gbps > 0 && FLAGS_gbps <= 1e6)) {
    return fail(InvalidArgumentError("--gbps " + gyre::FlagValue(FLAGS_gbps) +
                                     ": want a bandwidth above 0 and at most 1e6 GB/s"));
  }
  if (FLAGS_rank < -1 || FLAGS_rank >= FLAGS_p) {
    return fail(InvalidArgumentError(
        "--rank " + std::to_string(FLAGS_rank) + " is not a rank of -p " + std::to_string(FLAGS_p) +
        ": want 0 to " + std::to_string(FLAGS_p - 1) + ", or -1 for every rank"));
  }
  auto collective = ParseCollective(FLAGS_op);
  if (!collective.ok()) return fail(collective.status());
  auto dtype = ParseDataType(FLAGS_dtype);
  if (!dtype.ok()) return fail(dtype.status());
  auto rop = ParseReduceOp(FLAGS_reduce_op);
  if (!rop.ok()) return fail(rop.status());
  CollectiveSpec spec;
  spec.collective = *collective;
  spec.world_size = FLAGS_p;
  spec.count = FLAGS_count;
  spec.dtype = *dtype;
  spec.op = *rop;
  spec.root = FLAGS_root;
  spec.segment_elems = FLAGS_segment;
  spec.deterministic = FLAGS_deterministic;
  if (FLAGS_algo == "auto") {
    Status v = ValidateSpec(spec);
    if (!v.ok()) return fail(v);
    spec.algorithm = SelectAlgorithm(spec);
    std::printf("auto chose %s\n", AlgorithmName(spec.algorithm));
  } else {
    auto a = ParseAlgorithm(FLAGS_algo);
    if (!a.ok()) return fail(a.status());
    spec.algorithm = *a;
  }
  // Every rank's steps are built, verified and printed, at about kStepBytes each: a schedule
  // past kMaxSteps is refused up front, judged from the busiest of rank 0, the root and the
  // last rank times p, rather than running the machine out of memory. A segment count past
  // kMaxSegments is refused before even one rank is built.
  if (spec.segment_elems > 0 && spec.count / spec.segment_elems > kMaxSegments) {
    return fail(InvalidArgumentError(
        "--segment " + std::to_string(spec.segment_elems) + " cuts --count " +
        std::to_string(spec.count) + " into " +
        std::to_string((spec.count + spec.segment_elems - 1) / spec.segment_elems) +
        " segments; gyre-schedule builds at most " + std::to_string(kMaxSegments) +
        ": give a larger --segment"));
  }
  int64_t busiest = 0;
  int busiest_rank = 0;
  for (int r : std::set<int>{0, static_cast<int>(spec.root), FLAGS_p - 1}) {
    if (r < 0 || r >= FLAGS_p) continue;
    auto one = BuildRankSchedule(spec, r);
    if (!one.ok()) return fail(one.status());
    if (static_cast<int64_t>(one->steps.size()) > busiest) {
      busiest = static_cast<int64_t>(one->steps.size());
      busiest_rank = r;
    }
  }
  if (busiest * FLAGS_p > kMaxSteps) {
    return fail(InvalidArgumentError(
        "this schedule has about " + std::to_string(busiest * FLAGS_p) + " steps (" +
        std::to_string(busiest) + " on rank " + std::to_string(busiest_rank) + ", times " +
        std::to_string(FLAGS_p) + " ranks); gyre-schedule builds, verifies and prints at most " +
        std::to_string(kMaxSteps) + " (about " + std::to_string(kStepBytes) +
        " bytes each): give fewer ranks, a smaller --count or a larger --segment"));
  }
  auto schedule = BuildSchedule(spec);
  if (!schedule.ok()) return fail(schedule.status());
  if (FLAGS_rank >= 0) {
    std::cout << schedule->spec.ToString() << "\n"
              << FormatRankSchedule(schedule->ranks[FLAGS_rank]);
  } else {
    std::cout << FormatSchedule(*schedule);
  }
  Status v = VerifySchedule(*schedule);
  std::printf("verify: %s\n", v.ok() ? "ok" : v.ToString().c_str());
  CostParams params;
  params.alpha_s = FLAGS_alpha_us * 1e-6;
  params.beta_s_per_byte = 1.0 / (FLAGS_gbps * 1e9);
  auto cost = CostOf(*schedule, params);
  if (!cost.ok()) return fail(cost.status());
  std::printf("%-5s %6s %6s %12s %12s %7s\n", "rank", "sent", "recv", "elems_sent", "elems_recv",
              "rounds");
  for (int r = 0; r < FLAGS_p; ++r) {
    const RankCost& rc = cost->ranks[r];
    std::printf(
        "%-5d %6lld %6lld %12lld %12lld %7lld\n", r, static_cast<long long>(rc.traffic.msgs_sent),
        static_cast<long long>(rc.traffic.msgs_recv), static_cast<long long>(rc.traffic.elems_sent),
        static_cast<long long>(rc.traffic.elems_recv), static_cast<long long>(rc.rounds));
  }
  std::printf("alpha-beta time: %.3f us (alpha %.1f us, %.1f GB/s)\n", cost->time_s * 1e6,
              FLAGS_alpha_us, FLAGS_gbps);
  auto f = Theory(schedule->spec, 0);
  if (f.ok()) {
    std::printf("closed form: %g alpha + %g elements * beta%s\n", f->alpha_terms, f->beta_elems,
                FormulaIsExact(schedule->spec) ? "" : " (inexact for this count/segment)");
  }
  return v.ok() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "gyre-schedule [flags]: print, verify and cost one collective's schedule");
  return gyre::ExitCodeAfterFlushingStdout("gyre-schedule", Run(argc, argv));
}
