// gyre-bench: times gyre's collectives the way nccl-tests does, with BENCH.md's method (see
// bench/bench_common.h). One process per rank, started by gyrerun:
//
//   gyrerun -n 4 --mode embedded -- gyre-bench -b 4 -e 64M -f 4 --op allreduce --algo all
//   gyrerun -n 4 -- gyre-bench --algo auto --jsonl out.jsonl      (through gyred)
//
// Rank 0 prints an nccl-tests-style table (or JSONL lines); with --algo auto the algorithm
// the automatic choice ran is reported as "auto:<name>". A failed call prints its Status
// and the program exits non-zero.
#include <dirent.h>
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/explain.h"
#include "client/include/gyre/gyre.h"
#include "core/algo/builders.h"
#include "core/algo/collective.h"
#include "core/algo/schedule.h"
#include "core/base/reduce_kernels.h"
#include "core/base/stdout_check.h"
#include "core/base/tool_flags.h"
#include "core/job/identity.h"

DEFINE_string(b, "4", "minimum size in bytes (4, 1K, 64M ...)");
DEFINE_string(e, "64M", "maximum size in bytes");
DEFINE_int32(f, 4, "multiplication factor between sizes (at least 2 when -e is above -b)");
DEFINE_string(sizes, "", "comma-separated sizes (4,64K,1M), instead of -b/-e/-f");
DEFINE_int32(n, 0,
             "timed iterations per cell, up to 1000000; 0 = chosen so a cell takes about "
             "--cell_seconds");
DEFINE_int32(w, -1,
             "warm-up iterations; -1 = 5 up to 1 MiB, 2 above, and for auto under online tuning "
             "(GYRE_TUNE=1, gyrerun --tune) enough to cover the tuner's trial calls where it "
             "tunes");
DEFINE_int32(c, 1, "check the result once per cell (1) or not (0)");
DEFINE_string(d, "float32", "data type");
DEFINE_string(o, "sum", "reduction operator");
DEFINE_string(
    op, "allreduce",
    "allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|gather|scatter|barrier");
DEFINE_string(algo, "auto", "an algorithm name, 'auto', or 'all' (every algorithm, then auto)");
DEFINE_int32(root, 0, "root of broadcast, reduce, gather and scatter");
DEFINE_string(timing_barrier, "auto",
              "the barrier before each timed iteration: auto, dissemination, binomial or linear. "
              "With more ranks than cores its exit skew shows in small rooted collectives: a "
              "binomial or linear barrier releases the root first (see bench/results/"
              "2026-12-03-timing-barrier.md)");
DEFINE_bool(inplace, false, "allreduce/broadcast/reduce: one buffer for input and output");
DEFINE_string(jsonl, "", "also write one JSON line per cell to this file (rank 0)");
DEFINE_string(format, "table", "what rank 0 prints on stdout: table or jsonl");
DEFINE_bool(pin, false,
            "pin this rank (and in daemon mode its gyred) to CPU rank mod the allowed CPUs");
DEFINE_string(impl_name, "", "the impl field; default gyre or gyre-daemon by the mode");
DEFINE_string(mode, "", "embedded or daemon; empty: as gyrerun set the environment");
DEFINE_bool(list_algorithms, false, "print the algorithms of --op, one a line, and exit");
DEFINE_double(cell_seconds, 0.25, "target time of the timed iterations of one cell");
DEFINE_bool(explain, false,
            "after each size, print the cost model's estimate of every algorithm beside the "
            "measured medians (use with --algo all) and what auto ran");
DEFINE_bool(calibrate, false,
            "measure the cost model's parameters on this job first (latency per round, "
            "overhead per message, bandwidth, reduce and copy rates) and explain with them");
DEFINE_string(calibration_out, "",
              "with --calibrate: merge this world size's parameters into this calibration "
              "file (created if missing) and exit without benchmarking");
DEFINE_string(calibration, "",
              "the calibration file auto and --explain use (embedded mode; in daemon mode gyred "
              "reads its own --calibration or $GYRE_CALIBRATION); default $GYRE_CALIBRATION, "
              "else the built-in model");
DEFINE_double(model_alpha_us, 20, "--explain: latency per message, microseconds (if set)");
DEFINE_double(model_gbps, 3, "--explain: bandwidth per link, GB/s (if set)");
DEFINE_double(model_reduce_gbps, 6, "--explain: reduction rate, GB/s (if set)");
DEFINE_bool(alloc_buffers, true,
            "allocate the buffers with Comm::AllocBuffer (through the daemon: shared memory used "
            "in place); false: from the heap (through the daemon: copied via its staging area)");
DEFINE_bool(iteration_times, false,
            "after each cell, rank 0 prints every timed iteration's time (the slowest rank's), "
            "in microseconds, in order: for finding outliers and modes");
DEFINE_int32(
    estimate, 0,
    "print, for this many ranks (up to 256) on one host and without starting a job, the cost "
    "model's estimate of every algorithm at every size as JSON lines, and exit");
DEFINE_bool(report_memory, false,
            "every rank prints its peak RSS over each cell beside its resident memory before it "
            "(and its gyred's, through the daemon)");

namespace gyre::bench {
namespace {

algo::Collective CollectiveOf(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return algo::Collective::kAllreduce;
    case Op::kBroadcast:
      return algo::Collective::kBroadcast;
    case Op::kReduce:
      return algo::Collective::kReduce;
    case Op::kAllgather:
      return algo::Collective::kAllgather;
    case Op::kReduceScatter:
      return algo::Collective::kReduceScatter;
    case Op::kAlltoall:
      return algo::Collective::kAlltoall;
    case Op::kGather:
      return algo::Collective::kGather;
    case Op::kScatter:
      return algo::Collective::kScatter;
    case Op::kBarrier:
      return algo::Collective::kBarrier;
  }
  return algo::Collective::kAllreduce;
}

class GyreCollectives : public Collectives {
 public:
  explicit GyreCollectives(Comm& comm) : comm_(comm) {
    if (FLAGS_timing_barrier != "auto") barrier_options_.algorithm = FLAGS_timing_barrier;
  }
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  Status Barrier() override { return comm_.Barrier(barrier_options_); }
  Status MaxOverRanks(std::vector<double>* values) override {
    if (values->empty()) return Status::Ok();
    return comm_.Allreduce(values->data(), values->data(), static_cast<int64_t>(values->size()),
                           DataType::kFloat64, ReduceOp::kMax);
  }

 private:
  Comm& comm_;
  Options barrier_options_;
};

// Page-aligned so that every implementation sees buffers alike: from Comm::AllocBuffer
// (through the daemon, shared memory it uses in place) or, with --alloc_buffers=false, from
// the heap (through the daemon, copied through its staging area).
struct FreeDeleter {
  Comm* comm = nullptr;  // the block came from comm->AllocBuffer
  void operator()(void* p) const {
    if (comm != nullptr) {
      comm->FreeBuffer(p).IgnoreError();
    } else {
      std::free(p);
    }
  }
};
using Buffer = std::unique_ptr<unsigned char, FreeDeleter>;

StatusOr<Buffer> Allocate(Comm& comm, int64_t bytes) {
  const size_t n = static_cast<size_t>(std::max<int64_t>(bytes, 64));
  if (FLAGS_alloc_buffers) {
    GYRE_ASSIGN_OR_RETURN(void* p, comm.AllocBuffer(n));
    return Buffer(static_cast<unsigned char*>(p), FreeDeleter{&comm});
  }
  void* p = nullptr;
  if (posix_memalign(&p, 4096, n) != 0) {
    return ResourceExhaustedError("cannot allocate " + FormatSize(bytes));
  }
  return Buffer(static_cast<unsigned char*>(p));
}

Status RunOp(Comm& comm, Op op, const Shape& s, DataType dtype, ReduceOp redop, int root,
             const void* in, void* out, const Options& o) {
  switch (op) {
    case Op::kAllreduce:
      return comm.Allreduce(in, out, s.count, dtype, redop, o);
    case Op::kBroadcast:
      return comm.Broadcast(in, out, s.count, dtype, root, o);
    case Op::kReduce:
      return comm.Reduce(in, out, s.count, dtype, redop, root, o);
    case Op::kAllgather:
      return comm.Allgather(in, out, s.count, dtype, o);
    case Op::kReduceScatter:
      return comm.ReduceScatter(in, out, s.count, dtype, redop, o);
    case Op::kAlltoall:
      return comm.Alltoall(in, out, s.count, dtype, o);
    case Op::kGather:
      return comm.Gather(in, out, s.count, dtype, root, o);
    case Op::kScatter:
      return comm.Scatter(in, out, s.count, dtype, root, o);
    case Op::kBarrier:
      return comm.Barrier(o);
  }
  return InternalError("unknown op");
}

// The pid of the gyred serving `socket_path`: gyrerun starts it with --socket=<path>.
StatusOr<pid_t> FindDaemon(const std::string& socket_path) {
  const std::string want = "--socket=" + socket_path;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return NotFoundError("cannot list /proc");
  pid_t found = 0;
  while (dirent* entry = readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(entry->d_name));
    if (pid <= 0) continue;
    std::ifstream cmdline("/proc/" + std::string(entry->d_name) + "/cmdline");
    std::string arg;
    while (std::getline(cmdline, arg, '\0')) {
      if (arg == want) found = pid;
    }
    if (found != 0) break;
  }
  closedir(proc);
  if (found == 0) return NotFoundError("no process runs with " + want);
  return found;
}

StatusOr<std::vector<std::string>> AlgorithmList(Op op, const std::string& flag) {
  if (flag == "all") {
    std::vector<std::string> names;
    for (algo::Algorithm a : algo::AlgorithmsFor(CollectiveOf(op))) {
      names.push_back(algo::AlgorithmName(a));
    }
    names.push_back("auto");
    return names;
  }
  if (flag != "auto") {
    GYRE_ASSIGN_OR_RETURN(algo::Algorithm a, algo::ParseAlgorithm(flag));
    bool offered = false;
    for (algo::Algorithm b : algo::AlgorithmsFor(CollectiveOf(op))) offered |= a == b;
    if (!offered) {
      std::string names;
      for (algo::Algorithm b : algo::AlgorithmsFor(CollectiveOf(op))) {
        names += std::string(" ") + algo::AlgorithmName(b);
      }
      return InvalidArgumentError("--algo " + flag + " does not implement " + OpName(op) +
                                  "; it has:" + names + " (or auto, all)");
    }
  }
  return std::vector<std::string>{flag};
}

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : "+") + n;
  return out;
}

// --report_memory: the peak RSS of this process (and of its gyred, pid > 0) over one cell,
// against what was resident when the cell started, one line per rank.
struct MemoryWindow {
  pid_t daemon = 0;
  RssSample self, gyred;
  void Start() {
    (void)ResetPeakRss(0);
    self = ReadRss(0);
    if (daemon > 0 && ResetPeakRss(daemon).ok()) gyred = ReadRss(daemon);
  }
  void Print(int rank, const std::string& algo, int64_t bytes) const {
    constexpr double kMiB = 1024.0 * 1024.0;
    const RssSample now = ReadRss(0);
    std::printf(
        "# memory rank=%d algo=%s bytes=%lld rss_before_MiB=%.1f peak_MiB=%.1f "
        "growth_MiB=%.1f growth_x_buffer=%.2f",
        rank, algo.c_str(), static_cast<long long>(bytes), self.rss_bytes / kMiB,
        now.peak_bytes / kMiB, (now.peak_bytes - self.rss_bytes) / kMiB,
        bytes > 0 ? static_cast<double>(now.peak_bytes - self.rss_bytes) / bytes : 0.0);
    if (daemon > 0) {
      const RssSample d = ReadRss(daemon);
      std::printf(" gyred_before_MiB=%.1f gyred_peak_MiB=%.1f gyred_growth_MiB=%.1f",
                  gyred.rss_bytes / kMiB, d.peak_bytes / kMiB,
                  (d.peak_bytes - gyred.rss_bytes) / kMiB);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
};

// Each timed iteration keeps its time (8 bytes) until the cell ends, on every rank, and
// the times are combined over ranks in one call: a million is 8 MB and, at 10 us an
// iteration, 10 s a cell. (The automatic choice stays within 1000.)
constexpr int kMaxIterations = 1000000;
// --estimate builds every algorithm's schedule at every size, and its cost grows about 4x
// per doubling of the ranks: over the default 13 sizes, 256 ranks take about 8 s of CPU and
// 115 MB, 512 ranks over 30 s and 430 MB, 1024 ranks minutes and over 1.5 GB.
constexpr int kMaxEstimateRanks = 256;

// `rank` is -1 when this process is not (yet) a rank of a job.
int Fail(const Status& s, int rank) {
  if (rank < 0) {
    std::fprintf(stderr, "gyre-bench: %s\n", s.ToString().c_str());
  } else {
    std::fprintf(stderr, "gyre-bench rank %d: %s\n", rank, s.ToString().c_str());
  }
  return 1;
}

// The model auto and --explain use: --calibration, else $GYRE_CALIBRATION, else built in.
StatusOr<algo::MachineModel> CalibratedModel() {
  std::string file = FLAGS_calibration;
  if (const char* env = std::getenv("GYRE_CALIBRATION"); file.empty() && env != nullptr) {
    file = env;
  }
  if (file.empty()) return algo::DefaultMachineModel();
  return algo::ReadMachineModel(file);
}

// --estimate P: the model's view of every (size, algorithm) for P ranks on one host.
// bench/compare.py uses it to skip, in its first round, algorithms the model puts far
// behind at a size.
int PrintEstimates(Op op, DataType dtype, ReduceOp redop, const std::vector<int64_t>& sizes) {
  const int p = FLAGS_estimate;
  if (p < 1 || p > kMaxEstimateRanks) {
    return Fail(InvalidArgumentError("--estimate " + std::to_string(p) +
                                     ": the world size must be from 1 to " +
                                     std::to_string(kMaxEstimateRanks)),
                -1);
  }
  auto model_or = CalibratedModel();
  if (!model_or.ok()) return Fail(model_or.status().WithContext("--calibration"), -1);
  const algo::MachineModel& model = *model_or;
  const size_t esize = DataTypeSize(dtype);
  for (int64_t size : op == Op::kBarrier ? std::vector<int64_t>{0} : sizes) {
    const Shape shape = ShapeFor(op, size, p, esize);
    algo::CollectiveSpec spec =
        algo::MakeSpec(CollectiveOf(op), shape.count, dtype, redop, FLAGS_root);
    spec.world_size = p;
    for (const algo::Estimate& e : algo::RankCandidates(spec, model)) {
      // The schedule a forced job of this algorithm runs (embedded, one host).
      algo::CollectiveSpec forced = spec;
      forced.algorithm = e.algorithm;
      StatusOr<algo::Schedule> schedule = algo::BuildSchedule(forced);
      if (!schedule.ok()) return Fail(schedule.status().WithContext(forced.ToString()), -1);
      std::printf(
          "{\"op\": \"%s\", \"ranks\": %d, \"bytes\": %lld, \"algo\": \"%s\", "
          "\"estimate_us\": %.3f, \"shape\": \"%016llx\"}\n",
          OpName(op), p, static_cast<long long>(shape.bytes), algo::AlgorithmName(e.algorithm),
          e.seconds * 1e6, static_cast<unsigned long long>(algo::ScheduleShape(*schedule)));
    }
  }
  Status written = FlushStdout();
  return written.ok() ? 0 : Fail(written, -1);
}

// The numeric flags whose every value must mean what it says: a count that is not taken
// as asked is an error, not a different run.
Status CheckCountFlags() {
  if (FLAGS_n < 0 || FLAGS_n > kMaxIterations) {
    return InvalidArgumentError("-n " + std::to_string(FLAGS_n) +
                                ": timed iterations must be 0 (chosen by --cell_seconds) or 1 to " +
                                std::to_string(kMaxIterations));
  }
  if (FLAGS_w < -1 || FLAGS_w > kMaxIterations) {
    return InvalidArgumentError("-w " + std::to_string(FLAGS_w) +
                                ": warm-up iterations must be -1 (default) or 0 to " +
                                std::to_string(kMaxIterations));
  }
  // NaN here made the iteration count a huge number and the iteration-time vector abort.
  // A negative rate printed a model of 0.00 GB/s.
  if (std::string bad = FirstBadSecondsFlag(
          {{"--cell_seconds", FLAGS_cell_seconds, 0.001, 3600, "from 0.001 to 3600 seconds"},
           {"--model_alpha_us", FLAGS_model_alpha_us, 0, 1e9, "from 0 to 1e9 microseconds"},
           {"--model_gbps", FLAGS_model_gbps, 1e-6, 1e6, "from 1e-6 to 1e6 GB/s"},
           {"--model_reduce_gbps", FLAGS_model_reduce_gbps, 1e-6, 1e6, "from 1e-6 to 1e6 GB/s"}});
      !bad.empty()) {
    return InvalidArgumentError(bad);
  }
  if (!FLAGS_calibration_out.empty() && !FLAGS_calibrate) {
    return InvalidArgumentError("--calibration_out " + FLAGS_calibration_out +
                                " is written by --calibrate, which was not given");
  }
  if (FLAGS_c != 0 && FLAGS_c != 1) {
    return InvalidArgumentError("-c " + std::to_string(FLAGS_c) + ": want 1 (check) or 0");
  }
  if (FLAGS_timing_barrier != "auto" && FLAGS_timing_barrier != "dissemination" &&
      FLAGS_timing_barrier != "binomial" && FLAGS_timing_barrier != "linear") {
    return InvalidArgumentError("--timing_barrier '" + FLAGS_timing_barrier +
                                "': want auto, dissemination, binomial or linear");
  }
  return Status::Ok();
}

int Main(int argc, char** argv) {
  const int env_rank = std::getenv("GYRE_RANK") ? std::atoi(std::getenv("GYRE_RANK")) : -1;
  auto fail = [&](const Status& s) { return Fail(s, env_rank); };
  if (argc > 1) {
    return fail(
        InvalidArgumentError(std::string("unexpected argument '") + argv[1] +
                             "': gyre-bench takes flags only (sizes are -b, -e or --sizes)"));
  }
  if (Status s = CheckCountFlags(); !s.ok()) return fail(s);
  auto op_or = ParseOp(FLAGS_op);
  if (!op_or.ok()) return fail(op_or.status());
  const Op op = *op_or;
  auto dtype_or = ParseDataType(FLAGS_d);
  if (!dtype_or.ok()) return fail(dtype_or.status());
  const DataType dtype = *dtype_or;
  auto redop_or = ParseReduceOp(FLAGS_o);
  if (!redop_or.ok()) return fail(redop_or.status());
  const ReduceOp redop = *redop_or;
  if (op == Op::kAllreduce || op == Op::kReduce || op == Op::kReduceScatter) {
    Status supported = CheckReduceSupported(dtype, redop);
    if (!supported.ok()) return fail(supported);
  }
  auto sizes_or = SizesFromFlags(FLAGS_sizes, FLAGS_b, FLAGS_e, FLAGS_f);
  if (!sizes_or.ok()) return fail(sizes_or.status());
  if (FLAGS_inplace && op != Op::kAllreduce && op != Op::kBroadcast && op != Op::kReduce) {
    return fail(InvalidArgumentError("--inplace is for allreduce, broadcast and reduce only"));
  }
  if (FLAGS_estimate != 0) return PrintEstimates(op, dtype, redop, *sizes_or);
  if (FLAGS_list_algorithms) {
    for (algo::Algorithm a : algo::AlgorithmsFor(CollectiveOf(op))) {
      std::printf("%s\n", algo::AlgorithmName(a));
    }
    Status written = FlushStdout();
    return written.ok() ? 0 : fail(written);
  }
  auto algos_or = AlgorithmList(op, FLAGS_algo);
  if (!algos_or.ok()) return fail(algos_or.status());

  // Pin before the communicator starts its threads, so they inherit the CPU.
  int cpu = -1;
  if (FLAGS_pin && env_rank >= 0) {
    auto cpu_or = PinToRankCpu(env_rank);
    if (!cpu_or.ok()) return fail(cpu_or.status());
    cpu = *cpu_or;
  }

  // The model auto uses: the embedded communicator reads $GYRE_CALIBRATION.
  if (!FLAGS_calibration.empty()) {
    auto checked = algo::ReadMachineModel(FLAGS_calibration);
    if (!checked.ok()) return fail(checked.status().WithContext("--calibration"));
    setenv("GYRE_CALIBRATION", FLAGS_calibration.c_str(), 1);
  }
  StatusOr<std::unique_ptr<Comm>> comm_or = InvalidArgumentError("unset");
  const char* socket = std::getenv("GYRE_SOCKET");
  if (FLAGS_mode.empty()) {
    comm_or = Comm::FromEnvironment();
  } else if (FLAGS_mode == "embedded") {
    comm_or = Comm::Embedded();
    // Under a gyrerun in daemon mode the ranks' store is the daemons' to use, and not in this
    // process's environment: the error about it names flags gyre-bench does not have.
    if (!comm_or.ok() && socket != nullptr && *socket != '\0') {
      comm_or = comm_or.status().WithContext(
          "--mode embedded under a gyrerun that started daemons: run gyrerun --mode embedded");
    }
  } else if (FLAGS_mode == "daemon") {
    if (socket == nullptr || *socket == '\0') {
      return fail(InvalidArgumentError("--mode daemon needs GYRE_SOCKET (run under gyrerun)"));
    }
    comm_or = Comm::ConnectDaemon(socket, Deadline::After(*SteadyClock::Get(), Seconds(60)));
  } else {
    return fail(InvalidArgumentError("--mode must be embedded or daemon, not " + FLAGS_mode));
  }
  if (!comm_or.ok()) return fail(comm_or.status());
  Comm& comm = **comm_or;
  const int rank = comm.rank();
  const int p = comm.size();
  if (FLAGS_root < 0 || FLAGS_root >= p) {
    return Fail(InvalidArgumentError("--root " + std::to_string(FLAGS_root) + " is not a rank of " +
                                     std::to_string(p)),
                rank);
  }
  if (FLAGS_pin) {
    if (cpu < 0) {
      auto cpu_or = PinToRankCpu(rank);
      if (!cpu_or.ok()) return Fail(cpu_or.status(), rank);
      cpu = *cpu_or;
    }
    Status pinned = PinProcess(getpid(), cpu);  // threads started before pinning, if any
    if (!pinned.ok()) return Fail(pinned, rank);
    if (comm.mode() == "daemon" && socket != nullptr) {
      // The daemon does this rank's communication, so it goes on the same CPU.
      auto daemon = FindDaemon(socket);
      Status s = daemon.ok() ? PinProcess(*daemon, cpu) : daemon.status();
      if (!s.ok()) return Fail(s.WithContext("pinning this rank's gyred"), rank);
    }
  }
  const std::string impl = !FLAGS_impl_name.empty()
                               ? FLAGS_impl_name
                               : (comm.mode() == "daemon" ? "gyre-daemon" : "gyre");

  auto reporter_or = Reporter::Open(rank == 0, FLAGS_format, FLAGS_jsonl);
  if (!reporter_or.ok()) return Fail(reporter_or.status(), rank);
  Reporter& reporter = **reporter_or;
  // gyrerun --tune sets GYRE_TUNE for the program in either mode (gyred takes --tune).
  bool tuning = false;
  if (const char* t = std::getenv("GYRE_TUNE"); t != nullptr && *t != '\0') {
    auto parsed = job::ParseEnvSwitch("GYRE_TUNE", t);
    if (!parsed.ok()) return Fail(parsed.status(), rank);
    tuning = *parsed;
  }
  std::ostringstream title;
  title << "gyre-bench: " << OpName(op) << ", " << p << " ranks, impl " << impl << " (mode "
        << comm.mode() << "), " << DataTypeName(dtype) << " " << ReduceOpName(redop)
        << (FLAGS_pin ? ", pinned" : "")
        << (FLAGS_alloc_buffers ? ", buffers from AllocBuffer" : ", heap buffers")
        << (tuning ? ", online tuning" : "") << ", reduce kernels "
        << KernelIsaName(ReduceKernelIsa());
  reporter.Header(title.str());

  GyreCollectives coll(comm);
  const size_t esize = DataTypeSize(dtype);
  // The model --explain shows: the one auto uses (file or built in), else the --model_*
  // values when any is given, else this run's --calibrate measurement.
  auto model_or = CalibratedModel();
  if (!model_or.ok()) return Fail(model_or.status(), rank);
  algo::MachineModel model = *model_or;
  if (!gflags::GetCommandLineFlagInfoOrDie("model_alpha_us").is_default ||
      !gflags::GetCommandLineFlagInfoOrDie("model_gbps").is_default ||
      !gflags::GetCommandLineFlagInfoOrDie("model_reduce_gbps").is_default) {
    model.source = "--model_* flags";
    model.points = {algo::MachinePoint{p, FLAGS_model_alpha_us * 1e-6, 0, 1e-9 / FLAGS_model_gbps,
                                       1e-9 / FLAGS_model_reduce_gbps, 0}};
  }
  if (FLAGS_calibrate) {
    auto measured = Calibrate(comm);
    if (!measured.ok()) return Fail(measured.status().WithContext("--calibrate"), rank);
    if (rank == 0) std::printf("# calibrated %s\n", algo::DescribePoint(*measured).c_str());
    if (!FLAGS_calibration_out.empty()) {
      if (rank != 0) return 0;
      algo::MachineModel out;
      out.cores = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
      out.points.clear();
      if (access(FLAGS_calibration_out.c_str(), F_OK) == 0) {
        auto existing = algo::ReadMachineModel(FLAGS_calibration_out);
        if (!existing.ok()) return Fail(existing.status().WithContext("--calibration_out"), rank);
        out = *existing;
      }
      out.SetPoint(*measured);
      Status written = algo::WriteMachineModel(FLAGS_calibration_out, out);
      if (!written.ok()) return Fail(written, rank);
      std::printf("# wrote %s\n", FLAGS_calibration_out.c_str());
      return 0;
    }
    model.source = "measured by --calibrate";
    model.SetPoint(*measured);
  }
  if (FLAGS_explain && rank == 0) {
    std::fprintf(FLAGS_format == "jsonl" ? stderr : stdout, "# explain model (%s): %s\n",
                 model.source.c_str(), algo::DescribePoint(model.At(p)).c_str());
  }
  const std::vector<int64_t> sizes = op == Op::kBarrier ? std::vector<int64_t>{0} : *sizes_or;
  int64_t total_wrong = 0;
  bool canonical_for_all = false;  // the job turned a named reduction into canonical
  for (int64_t size : sizes) {
    const Shape shape = ShapeFor(op, size, p, esize);
    // The size column shows what ran; say why it differs from what was asked.
    if (rank == 0 && op != Op::kBarrier && shape.bytes != size) {
      std::fprintf(FLAGS_format == "jsonl" ? stderr : stdout,
                   "# %lld B runs as %lld B (whole %s elements: at least one per rank, the "
                   "same number on each where the call splits its buffer)\n",
                   static_cast<long long>(size), static_cast<long long>(shape.bytes),
                   DataTypeName(dtype));
    }
    auto in_or = Allocate(comm, shape.in_elems * static_cast<int64_t>(esize));
    if (!in_or.ok()) return Fail(in_or.status(), rank);
    auto out_or = Allocate(comm, shape.out_elems * static_cast<int64_t>(esize));
    if (!out_or.ok()) return Fail(out_or.status(), rank);
    unsigned char* in = in_or->get();
    unsigned char* out = FLAGS_inplace ? in : out_or->get();
    std::map<std::string, double> measured_us;
    std::string auto_ran;
    bool named_ran = false;  // at this size
    for (const std::string& name : *algos_or) {
      // A deterministic job runs every reduction as canonical: once measured at this size,
      // the other names would only measure it again.
      if (canonical_for_all && named_ran && name != "auto") continue;
      named_ran = named_ran || name != "auto";
      Options options;
      options.algorithm = name == "auto" ? "" : name;
      FillInput(dtype, redop, rank, in, shape.in_elems);
      if (!FLAGS_inplace) std::memset(out, 0xff, shape.out_elems * esize);
      auto run = [&] { return RunOp(comm, op, shape, dtype, redop, FLAGS_root, in, out, options); };
      std::set<std::string> ran;
      Result result;
      auto check = [&]() -> Status {
        // auto reports what the timed iterations ran (a tuner's trials are warm-ups).
        if (name != "auto") ran.insert(comm.last().algorithm);
        if (FLAGS_c == 0) return Status::Ok();
        GYRE_ASSIGN_OR_RETURN(
            result.wrong,
            SumWrongOverRanks(coll, CountWrong(op, dtype, redop, rank, p, FLAGS_root, shape, out)));
        total_wrong += result.wrong;
        return Status::Ok();
      };
      MemoryWindow memory;
      if (FLAGS_report_memory) {
        if (comm.mode() == "daemon" && socket != nullptr) {
          auto daemon = FindDaemon(socket);
          if (daemon.ok()) memory.daemon = *daemon;
        }
        memory.Start();
      }
      int warmups = FLAGS_w >= 0 ? FLAGS_w : DefaultWarmups(shape.bytes);
      if (tuning && FLAGS_w < 0 && name == "auto") {
        warmups = TunedWarmups(warmups, shape.count * static_cast<int64_t>(esize));
      }
      auto timing = TimeCell(
          coll, run, check, [&] { ran.insert(comm.last().algorithm); }, warmups, FLAGS_n,
          FLAGS_cell_seconds);
      if (!timing.ok()) {
        return Fail(timing.status().WithContext(std::string(OpName(op)) + " " + name + " " +
                                                FormatSize(shape.bytes)),
                    rank);
      }
      // Deterministic mode (gyrerun --deterministic, GYRE_DETERMINISTIC) runs a reduction as
      // the canonical schedule whatever was asked; anything else must run as named.
      const bool reduction = op == Op::kAllreduce || op == Op::kReduce || op == Op::kReduceScatter;
      const bool made_canonical = name != "auto" && name != "canonical" && reduction &&
                                  ran.size() == 1 && *ran.begin() == "canonical";
      if (name != "auto" && !made_canonical && (ran.size() != 1 || *ran.begin() != name)) {
        return Fail(InternalError("--algo " + name + " was asked for but " + Join(ran) + " ran"),
                    rank);
      }
      if (made_canonical) {
        if (rank == 0 && !canonical_for_all) {
          std::fprintf(FLAGS_format == "jsonl" ? stderr : stdout,
                       "# --algo %s ran as canonical: the job is deterministic (--deterministic, "
                       "GYRE_DETERMINISTIC), and its reductions run the canonical schedule "
                       "whatever algorithm is asked; the other names are not run\n",
                       name.c_str());
        }
        canonical_for_all = true;
      }
      result.impl = impl;
      result.algo = name == "auto" ? "auto:" + Join(ran) : *ran.begin();
      result.op = op;
      result.ranks = p;
      result.bytes = shape.bytes;
      result.count = shape.bytes / static_cast<int64_t>(esize);
      result.dtype = DataTypeName(dtype);
      result.redop = op == Op::kAllreduce || op == Op::kReduce || op == Op::kReduceScatter
                         ? ReduceOpName(redop)
                         : "none";
      Summarise(timing->seconds, BusFactor(op, p), &result);
      reporter.Emit(result);
      if (FLAGS_iteration_times && rank == 0) {
        std::string line =
            "# iterations_us " + result.algo + " " + std::to_string(shape.bytes) + ":";
        for (double t : timing->seconds) line += " " + std::to_string(std::lround(t * 1e6));
        std::fprintf(FLAGS_format == "jsonl" ? stderr : stdout, "%s\n", line.c_str());
        std::fflush(nullptr);
      }
      if (FLAGS_report_memory) memory.Print(rank, result.algo, shape.bytes);
      measured_us[name] = result.median_us;
      if (name == "auto") auto_ran = Join(ran);
    }
    if (FLAGS_explain && rank == 0) {
      algo::CollectiveSpec spec =
          algo::MakeSpec(CollectiveOf(op), shape.count, dtype, redop, FLAGS_root);
      spec.world_size = p;
      const std::string text = Explain(spec, model, measured_us, auto_ran);
      std::fputs(text.c_str(), FLAGS_format == "jsonl" ? stderr : stdout);
      std::fflush(nullptr);
    }
  }
  reporter.Footer(total_wrong);
  Status written = reporter.Close();
  if (written.ok()) written = FlushStdout();
  if (!written.ok()) return Fail(written, rank);
  // Every rank gets here after the same calls: Close meets them all and removes this rank's
  // records from the store, so the same job id can run again.
  if (Status closed = comm.Close(); !closed.ok()) {
    return Fail(closed.WithContext("closing the communicator"), rank);
  }
  return total_wrong == 0 ? 0 : 2;
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) {
  // Logging as before, warnings and errors on stderr (--minloglevel=0 shows the rest), but
  // started: glog otherwise prefixes the first warning with a line saying it was not.
  gflags::SetCommandLineOptionWithMode("logtostderr", "true", gflags::SET_FLAGS_DEFAULT);
  gflags::SetCommandLineOptionWithMode("minloglevel", "1", gflags::SET_FLAGS_DEFAULT);
  gyre::ParseToolFlags(
      &argc, &argv,
      "gyrerun -n P [--mode embedded] -- gyre-bench [-b 4] [-e 64M] [-f 4] [--op allreduce] "
      "[--algo auto|all|NAME] [--jsonl FILE]");
  google::InitGoogleLogging(argv[0]);
  return gyre::bench::Main(argc, argv);
}
