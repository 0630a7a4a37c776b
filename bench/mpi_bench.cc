// gyre-bench-mpi: MPI's collectives (Open MPI here) timed with BENCH.md's method and printed
// in gyre-bench's format (impl "openmpi"), for bench/compare.sh. Started by mpirun, e.g.
//
//   mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1
//     --mca btl tcp,self --mca btl_tcp_if_include lo -np 4 gyre-bench-mpi --pin
//
// MPI picks its own algorithm per call, so `algo` is a label given with --algo_label (for
// example "default" or "yield" for a run with --mca mpi_yield_when_idle 1).
#include <gflags/gflags.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "core/base/tool_flags.h"

DEFINE_string(b, "4", "minimum size in bytes (4, 1K, 64M ...)");
DEFINE_string(e, "64M", "maximum size in bytes");
DEFINE_int32(f, 4, "multiplication factor between sizes");
DEFINE_string(sizes, "", "comma-separated sizes (4,64K,1M), instead of -b/-e/-f");
DEFINE_int32(n, 0, "timed iterations per cell; 0 = chosen so a cell takes about --cell_seconds");
DEFINE_int32(w, -1, "warm-up iterations; -1 = 5 up to 1 MiB, 2 above");
DEFINE_int32(c, 1, "check the result once per cell (1) or not (0)");
DEFINE_string(d, "float32", "data type (float32 only)");
DEFINE_string(o, "sum", "reduction operator (sum only)");
DEFINE_string(
    op, "allreduce",
    "allreduce|broadcast|reduce|allgather|reduce_scatter|alltoall|gather|scatter|barrier");
DEFINE_string(algo_label, "default", "the algo field (MPI chooses the algorithm itself)");
DEFINE_int32(root, 0, "root of broadcast, reduce, gather and scatter");
DEFINE_string(jsonl, "", "also write one JSON line per cell to this file (rank 0)");
DEFINE_string(format, "table", "what rank 0 prints on stdout: table or jsonl");
DEFINE_bool(pin, false, "pin this rank to CPU rank mod the allowed CPUs (before MPI_Init)");
DEFINE_string(impl_name, "openmpi", "the impl field");
DEFINE_double(cell_seconds, 0.25, "target time of the timed iterations of one cell");

namespace gyre::bench {
namespace {

Status Check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return UnavailableError(what + ": " + std::string(text, static_cast<size_t>(len)));
}

class MpiCollectives : public Collectives {
 public:
  MpiCollectives() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Barrier() override { return Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  Status MaxOverRanks(std::vector<double>* values) override {
    if (values->empty()) return Status::Ok();
    return Check(MPI_Allreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()),
                               MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
                 "MPI_Allreduce max");
  }

 private:
  int rank_ = 0, size_ = 1;
};

Status RunOp(Op op, const Shape& s, int root, const float* in, float* out) {
  const int count = static_cast<int>(s.count);
  switch (op) {
    case Op::kAllreduce:
      return Check(MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                   "MPI_Allreduce");
    case Op::kBroadcast:
      return Check(MPI_Bcast(out, count, MPI_FLOAT, root, MPI_COMM_WORLD), "MPI_Bcast");
    case Op::kReduce:
      return Check(MPI_Reduce(in, out, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD),
                   "MPI_Reduce");
    case Op::kAllgather:
      return Check(MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD),
                   "MPI_Allgather");
    case Op::kReduceScatter:
      return Check(MPI_Reduce_scatter_block(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
                   "MPI_Reduce_scatter_block");
    case Op::kAlltoall:
      return Check(MPI_Alltoall(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD),
                   "MPI_Alltoall");
    case Op::kGather:
      return Check(MPI_Gather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, root, MPI_COMM_WORLD),
                   "MPI_Gather");
    case Op::kScatter:
      return Check(MPI_Scatter(in, count, MPI_FLOAT, out, count, MPI_FLOAT, root, MPI_COMM_WORLD),
                   "MPI_Scatter");
    case Op::kBarrier:
      return Check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }
  return InternalError("unknown op");
}

int Fail(const Status& s, int rank) {
  std::fprintf(stderr, "gyre-bench-mpi rank %d: %s\n", rank, s.ToString().c_str());
  return 1;
}

int Main(int* argc, char*** argv) {
  // Pinned before MPI_Init, so the threads Open MPI starts inherit the CPU.
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (FLAGS_pin && env_rank != nullptr) {
    auto cpu = PinToRankCpu(std::atoi(env_rank));
    if (!cpu.ok()) return Fail(cpu.status(), std::atoi(env_rank));
  }
  MPI_Init(argc, argv);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MpiCollectives coll;
  const int rank = coll.rank();
  const int p = coll.size();
  auto finish = [](int code) {
    if (code != 0) MPI_Abort(MPI_COMM_WORLD, code);  // the other ranks would wait forever
    MPI_Finalize();
    return code;
  };
  if (FLAGS_pin && env_rank == nullptr) {
    auto cpu = PinToRankCpu(rank);
    Status s = cpu.ok() ? PinProcess(getpid(), *cpu) : cpu.status();
    if (!s.ok()) return finish(Fail(s, rank));
  }
  auto op_or = ParseOp(FLAGS_op);
  if (!op_or.ok()) return finish(Fail(op_or.status(), rank));
  const Op op = *op_or;
  if (FLAGS_d != "float32" || FLAGS_o != "sum") {
    return finish(Fail(InvalidArgumentError("gyre-bench-mpi measures float32 sum only"), rank));
  }
  if (FLAGS_root < 0 || FLAGS_root >= p) {
    return finish(Fail(InvalidArgumentError("--root is not a rank"), rank));
  }
  auto sizes_or = SizesFromFlags(FLAGS_sizes, FLAGS_b, FLAGS_e, FLAGS_f);
  if (!sizes_or.ok()) return finish(Fail(sizes_or.status(), rank));
  auto reporter_or = Reporter::Open(rank == 0, FLAGS_format, FLAGS_jsonl);
  if (!reporter_or.ok()) return finish(Fail(reporter_or.status(), rank));
  Reporter& reporter = **reporter_or;
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int version_len = 0;
  MPI_Get_library_version(version, &version_len);
  std::string library(version, static_cast<size_t>(version_len));
  library = library.substr(0, library.find_first_of(",\n"));
  reporter.Header("gyre-bench-mpi: " + FLAGS_op + ", " + std::to_string(p) + " ranks, impl " +
                  FLAGS_impl_name + " (" + library + "), float32 sum" +
                  (FLAGS_pin ? ", pinned" : ""));

  const std::vector<int64_t> sizes = op == Op::kBarrier ? std::vector<int64_t>{0} : *sizes_or;
  int64_t total_wrong = 0;
  for (int64_t size : sizes) {
    const Shape shape = ShapeFor(op, size, p, sizeof(float));
    std::vector<float> in(static_cast<size_t>(std::max<int64_t>(shape.in_elems, 1)));
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(shape.out_elems, 1)));
    FillInput(DataType::kFloat32, ReduceOp::kSum, rank, in.data(), shape.in_elems);
    std::memset(out.data(), 0xff, out.size() * sizeof(float));
    if (op == Op::kBroadcast && rank == FLAGS_root) {  // MPI_Bcast works in place
      std::memcpy(out.data(), in.data(), static_cast<size_t>(shape.in_elems) * sizeof(float));
    }
    auto run = [&] { return RunOp(op, shape, FLAGS_root, in.data(), out.data()); };
    Result result;
    auto check = [&]() -> Status {
      if (FLAGS_c == 0) return Status::Ok();
      GYRE_ASSIGN_OR_RETURN(
          result.wrong,
          SumWrongOverRanks(coll, CountWrong(op, DataType::kFloat32, ReduceOp::kSum, rank, p,
                                             FLAGS_root, shape, out.data())));
      total_wrong += result.wrong;
      return Status::Ok();
    };
    auto timing =
        TimeCell(coll, run, check, {}, FLAGS_w >= 0 ? FLAGS_w : DefaultWarmups(shape.bytes),
                 FLAGS_n, FLAGS_cell_seconds);
    if (!timing.ok()) return finish(Fail(timing.status(), rank));
    result.impl = FLAGS_impl_name;
    result.algo = FLAGS_algo_label;
    result.op = op;
    result.ranks = p;
    result.bytes = shape.bytes;
    result.count = shape.bytes / static_cast<int64_t>(sizeof(float));
    result.redop =
        op == Op::kAllreduce || op == Op::kReduce || op == Op::kReduceScatter ? "sum" : "none";
    Summarise(timing->seconds, BusFactor(op, p), &result);
    reporter.Emit(result);
  }
  reporter.Footer(total_wrong);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 2;
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "mpirun ... -np P gyre-bench-mpi [-b 4] [-e 64M] [-f 4] [--op allreduce]");
  return gyre::bench::Main(&argc, &argv);
}
