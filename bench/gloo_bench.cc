// gyre-bench-gloo: Gloo's collectives timed with BENCH.md's method and printed in the same
// format as gyre-bench (impl "gloo"), so bench/compare.sh can set the two side by side.
// Gloo runs on its tcp device over 127.0.0.1 and meets through a FileStore folder. Rank and
// world size come from the environment (GYRE_RANK/GYRE_WORLD_SIZE as gyrerun sets them, or
// RANK/WORLD_SIZE), so `gyrerun --mode embedded -n 4 -- gyre-bench-gloo` starts a job.
//
// Algorithms, named as Gloo names them: allreduce ring, ring_chunked, halving_doubling,
// bcube (the algorithm classes, built once per cell and run in place, as Gloo intends) and
// allreduce (the gloo::allreduce function); broadcast one_to_all and broadcast; allgather
// ring and allgather; gather and scatter (the functions); barrier all_to_one, all_to_all
// and barrier.
#include <gflags/gflags.h>
#include <gloo/allgather.h>
#include <gloo/allgather_ring.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_bcube.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/barrier_all_to_one.h>
#include <gloo/broadcast.h>
#include <gloo/broadcast_one_to_all.h>
#include <gloo/gather.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
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
DEFINE_string(op, "allreduce", "allreduce|broadcast|allgather|gather|scatter|barrier");
DEFINE_string(algo, "ring", "a Gloo algorithm of --op (see the file comment), or 'all'");
DEFINE_int32(root, 0, "root of broadcast, gather and scatter");
DEFINE_string(jsonl, "", "also write one JSON line per cell to this file (rank 0)");
DEFINE_string(format, "table", "what rank 0 prints on stdout: table or jsonl");
DEFINE_bool(pin, false, "pin this rank to CPU rank mod the allowed CPUs");
DEFINE_string(impl_name, "gloo", "the impl field");
DEFINE_string(store_dir, "",
              "FileStore folder, new for each job; default: next to gyrerun's file store");
DEFINE_double(timeout, 60, "Gloo's timeout for every operation, in seconds");
DEFINE_bool(list_algorithms, false, "print the algorithms of --op, one a line, and exit");
DEFINE_double(cell_seconds, 0.25, "target time of the timed iterations of one cell");

namespace gyre::bench {
namespace {

// Gloo reports failures by throwing; they stop here and become a Status.
template <typename F>
Status Guard(const std::string& what, F&& f) {
  try {
    f();
    return Status::Ok();
  } catch (const std::exception& e) {
    return UnavailableError("gloo " + what + ": " + e.what());
  }
}

void MaxDoubles(void* out, const void* a, const void* b, size_t n) {
  double* o = static_cast<double*>(out);
  const double* x = static_cast<const double*>(a);
  const double* y = static_cast<const double*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] > y[i] ? x[i] : y[i];
}

void SumFloats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

class GlooCollectives : public Collectives {
 public:
  explicit GlooCollectives(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {}
  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  Status Barrier() override {
    return Guard("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      gloo::barrier(opts);
    });
  }
  Status MaxOverRanks(std::vector<double>* values) override {
    if (values->empty()) return Status::Ok();
    return Guard("allreduce max", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(values->data(), values->size());
      opts.setReduceFunction(MaxDoubles);
      gloo::allreduce(opts);
    });
  }
  const std::shared_ptr<gloo::Context>& context() const { return context_; }

 private:
  std::shared_ptr<gloo::Context> context_;
};

int EnvInt(const char* a, const char* b) {
  const char* v = std::getenv(a);
  if (v == nullptr) v = std::getenv(b);
  return v == nullptr ? -1 : std::atoi(v);
}

std::vector<std::string> AlgorithmsOf(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return {"ring", "ring_chunked", "halving_doubling", "bcube", "allreduce"};
    case Op::kBroadcast:
      return {"one_to_all", "broadcast"};
    case Op::kAllgather:
      return {"ring", "allgather"};
    case Op::kGather:
      return {"gather"};
    case Op::kScatter:
      return {"scatter"};
    case Op::kBarrier:
      return {"all_to_one", "all_to_all", "barrier"};
    default:
      return {};
  }
}

// One cell's operation, set up before the timing starts (Gloo's algorithm objects register
// their buffers once and are meant to be run many times).
struct Prepared {
  std::unique_ptr<gloo::Algorithm> algorithm;
  std::function<void()> call;  // for the function-style API
  void Run() {
    if (algorithm) {
      algorithm->run();
    } else {
      call();
    }
  }
};

StatusOr<Prepared> Prepare(const std::shared_ptr<gloo::Context>& ctx, Op op,
                           const std::string& algo, const Shape& shape, int root, float* in,
                           float* out, std::chrono::milliseconds timeout) {
  Prepared p;
  const int count = static_cast<int>(shape.count);
  Status s = Guard("setting up " + algo, [&] {
    switch (op) {
      case Op::kAllreduce: {
        std::vector<float*> ptrs = {out};
        if (algo == "ring") {
          p.algorithm = std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, count);
        } else if (algo == "ring_chunked") {
          p.algorithm = std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count);
        } else if (algo == "halving_doubling") {
          p.algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count);
        } else if (algo == "bcube") {
          p.algorithm = std::make_unique<gloo::AllreduceBcube<float>>(ctx, ptrs, count);
        } else {
          p.call = [ctx, out, count, timeout] {
            gloo::AllreduceOptions opts(ctx);
            opts.setOutput(out, static_cast<size_t>(count));
            opts.setReduceFunction(SumFloats);
            opts.setTimeout(timeout);
            gloo::allreduce(opts);
          };
        }
        break;
      }
      case Op::kBroadcast:
        if (algo == "one_to_all") {
          p.algorithm = std::make_unique<gloo::BroadcastOneToAll<float>>(
              ctx, std::vector<float*>{out}, static_cast<size_t>(count), root);
        } else {
          p.call = [ctx, out, count, root, timeout] {
            gloo::BroadcastOptions opts(ctx);
            opts.setOutput(out, static_cast<size_t>(count));
            opts.setRoot(root);
            opts.setTimeout(timeout);
            gloo::broadcast(opts);
          };
        }
        break;
      case Op::kAllgather:
        if (algo == "ring") {
          p.algorithm = std::make_unique<gloo::AllgatherRing<float>>(
              ctx, std::vector<const float*>{in}, out, count);
        } else {
          p.call = [ctx, in, out, count, timeout] {
            gloo::AllgatherOptions opts(ctx);
            opts.setInput(in, static_cast<size_t>(count));
            opts.setOutput(out, static_cast<size_t>(count) * static_cast<size_t>(ctx->size));
            opts.setTimeout(timeout);
            gloo::allgather(opts);
          };
        }
        break;
      case Op::kGather:
        p.call = [ctx, in, out, count, root, timeout] {
          gloo::GatherOptions opts(ctx);
          opts.setInput(in, static_cast<size_t>(count));
          // Only the root receives.
          if (ctx->rank == root) {
            opts.setOutput(out, static_cast<size_t>(count) * static_cast<size_t>(ctx->size));
          }
          opts.setRoot(root);
          opts.setTimeout(timeout);
          gloo::gather(opts);
        };
        break;
      case Op::kScatter: {
        // Only the root sends: block q of its input to rank q (listed once, not per call).
        std::vector<float*> blocks;
        for (int q = 0; ctx->rank == root && q < ctx->size; ++q) {
          blocks.push_back(in + int64_t{q} * count);
        }
        p.call = [ctx, blocks, out, count, root, timeout]() mutable {
          gloo::ScatterOptions opts(ctx);
          if (!blocks.empty()) {
            opts.setInputs(blocks.data(), blocks.size(), static_cast<size_t>(count));
          }
          opts.setOutput(out, static_cast<size_t>(count));
          opts.setRoot(root);
          opts.setTimeout(timeout);
          gloo::scatter(opts);
        };
        break;
      }
      case Op::kBarrier:
        if (algo == "all_to_one") {
          p.algorithm = std::make_unique<gloo::BarrierAllToOne>(ctx);
        } else if (algo == "all_to_all") {
          p.algorithm = std::make_unique<gloo::BarrierAllToAll>(ctx);
        } else {
          p.call = [ctx, timeout] {
            gloo::BarrierOptions opts(ctx);
            opts.setTimeout(timeout);
            gloo::barrier(opts);
          };
        }
        break;
      default:
        break;
    }
  });
  if (!s.ok()) return s;
  return p;
}

int Fail(const Status& s, int rank) {
  std::fprintf(stderr, "gyre-bench-gloo rank %d: %s\n", rank, s.ToString().c_str());
  return 1;
}

int Main() {
  if (FLAGS_list_algorithms) {
    auto op = ParseOp(FLAGS_op);
    if (!op.ok()) return Fail(op.status(), -1);
    for (const std::string& name : AlgorithmsOf(*op)) std::printf("%s\n", name.c_str());
    return 0;
  }
  const int rank = EnvInt("GYRE_RANK", "RANK");
  const int world = EnvInt("GYRE_WORLD_SIZE", "WORLD_SIZE");
  if (rank < 0 || world < 1 || rank >= world) {
    return Fail(InvalidArgumentError("set GYRE_RANK and GYRE_WORLD_SIZE (or RANK and "
                                     "WORLD_SIZE), e.g. run under gyrerun --mode embedded"),
                rank);
  }
  auto op_or = ParseOp(FLAGS_op);
  if (!op_or.ok()) return Fail(op_or.status(), rank);
  const Op op = *op_or;
  const std::vector<std::string> offered = AlgorithmsOf(op);
  if (offered.empty()) {
    return Fail(InvalidArgumentError("--op " + FLAGS_op + " is not benchmarked for Gloo"), rank);
  }
  std::vector<std::string> algos = {FLAGS_algo};
  if (FLAGS_algo == "all") {
    algos = offered;
  } else if (std::find(offered.begin(), offered.end(), FLAGS_algo) == offered.end()) {
    std::string names;
    for (const std::string& n : offered) names += " " + n;
    return Fail(InvalidArgumentError("Gloo has no " + FLAGS_op + " algorithm '" + FLAGS_algo +
                                     "'; it has:" + names),
                rank);
  }
  if (FLAGS_d != "float32" || FLAGS_o != "sum") {
    return Fail(InvalidArgumentError("gyre-bench-gloo measures float32 sum only"), rank);
  }
  if (FLAGS_root < 0 || FLAGS_root >= world) {
    return Fail(InvalidArgumentError("--root " + std::to_string(FLAGS_root) + " is not a rank"),
                rank);
  }
  auto sizes_or = SizesFromFlags(FLAGS_sizes, FLAGS_b, FLAGS_e, FLAGS_f);
  if (!sizes_or.ok()) return Fail(sizes_or.status(), rank);

  std::string store_dir = FLAGS_store_dir;
  if (store_dir.empty()) {
    const char* store = std::getenv("GYRE_STORE");
    const std::string prefix = "file://";
    if (store == nullptr || std::string(store).rfind(prefix, 0) != 0) {
      return Fail(InvalidArgumentError("--store_dir is needed (no file:// GYRE_STORE to put "
                                       "Gloo's FileStore next to)"),
                  rank);
    }
    store_dir = std::string(store).substr(prefix.size()) + "-gloo";
  }
  if (mkdir(store_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Fail(InvalidArgumentError("cannot create --store_dir " + store_dir + ": " +
                                     std::strerror(errno)),
                rank);
  }
  if (FLAGS_pin) {  // before Gloo starts its event loop thread, which inherits the CPU
    auto cpu = PinToRankCpu(rank);
    if (!cpu.ok()) return Fail(cpu.status(), rank);
  }

  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(FLAGS_timeout * 1000.0));
  std::shared_ptr<gloo::rendezvous::Context> context;
  Status s = Guard("connecting through " + store_dir, [&] {
    gloo::transport::tcp::attr attr("127.0.0.1");
    auto device = gloo::transport::tcp::CreateDevice(attr);
    gloo::rendezvous::FileStore store(store_dir);
    context = std::make_shared<gloo::rendezvous::Context>(rank, world);
    context->setTimeout(timeout);
    context->connectFullMesh(store, device);
  });
  if (!s.ok()) return Fail(s, rank);
  GlooCollectives coll(context);

  auto reporter_or = Reporter::Open(rank == 0, FLAGS_format, FLAGS_jsonl);
  if (!reporter_or.ok()) return Fail(reporter_or.status(), rank);
  Reporter& reporter = **reporter_or;
  reporter.Header("gyre-bench-gloo: " + FLAGS_op + ", " + std::to_string(world) + " ranks, impl " +
                  FLAGS_impl_name + " (tcp 127.0.0.1), float32 sum" +
                  (FLAGS_pin ? ", pinned" : ""));

  const std::vector<int64_t> sizes = op == Op::kBarrier ? std::vector<int64_t>{0} : *sizes_or;
  int64_t total_wrong = 0;
  for (int64_t size : sizes) {
    const Shape shape = ShapeFor(op, size, world, sizeof(float));
    std::vector<float> in(static_cast<size_t>(std::max<int64_t>(shape.in_elems, 1)));
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(shape.out_elems, 1)));
    for (const std::string& algo : algos) {
      // Gloo's allreduce and broadcast work in place on `out`: it starts as this rank's data.
      FillInput(DataType::kFloat32, ReduceOp::kSum, rank, in.data(), shape.in_elems);
      std::memset(out.data(), 0xff, out.size() * sizeof(float));
      if (op == Op::kAllreduce || (op == Op::kBroadcast && rank == FLAGS_root)) {
        std::memcpy(out.data(), in.data(), static_cast<size_t>(shape.in_elems) * sizeof(float));
      }
      auto prepared = Prepare(context, op, algo, shape, FLAGS_root, in.data(), out.data(), timeout);
      if (!prepared.ok()) return Fail(prepared.status(), rank);
      auto run = [&] { return Guard(FLAGS_op + " " + algo, [&] { prepared->Run(); }); };
      Result result;
      auto check = [&]() -> Status {
        if (FLAGS_c == 0) return Status::Ok();
        GYRE_ASSIGN_OR_RETURN(
            result.wrong,
            SumWrongOverRanks(coll, CountWrong(op, DataType::kFloat32, ReduceOp::kSum, rank, world,
                                               FLAGS_root, shape, out.data())));
        total_wrong += result.wrong;
        return Status::Ok();
      };
      auto timing =
          TimeCell(coll, run, check, {}, FLAGS_w >= 0 ? FLAGS_w : DefaultWarmups(shape.bytes),
                   FLAGS_n, FLAGS_cell_seconds);
      if (!timing.ok()) {
        return Fail(
            timing.status().WithContext(FLAGS_op + " " + algo + " " + FormatSize(shape.bytes)),
            rank);
      }
      result.impl = FLAGS_impl_name;
      result.algo = algo;
      result.op = op;
      result.ranks = world;
      result.bytes = shape.bytes;
      result.count = shape.bytes / static_cast<int64_t>(sizeof(float));
      result.redop = op == Op::kAllreduce ? "sum" : "none";
      Summarise(timing->seconds, BusFactor(op, world), &result);
      reporter.Emit(result);
    }
  }
  reporter.Footer(total_wrong);
  return total_wrong == 0 ? 0 : 2;
}

}  // namespace
}  // namespace gyre::bench

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "gyrerun -n P --mode embedded -- gyre-bench-gloo [-b 4] [-e 64M] [-f 4] "
                       "[--op allreduce] [--algo ring|ring_chunked|halving_doubling|bcube|all]");
  return gyre::bench::Main();
}
