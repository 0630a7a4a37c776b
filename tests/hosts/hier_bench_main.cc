// gyre-hier-bench: flat ring against hierarchical allreduce on real ranks spread over hosts.
// Each process joins the job from its environment (as gyrerun --mode embedded starts it),
// learns from the rendezvous how many ranks share each host, and runs hierarchical allreduce
// with that node size. Rank 0 prints one line per size and algorithm. Every cell's result
// is checked once, so the program doubles as a correctness test across hosts.
#include <gflags/gflags.h>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "core/job/address.h"
#include "core/job/bootstrap.h"
#include "core/job/identity.h"

DEFINE_string(sizes, "1M,16M,64M", "allreduce sizes in bytes (K, M suffixes)");
DEFINE_string(algos, "ring,hierarchical", "algorithms to compare ('auto': automatic choice)");
DEFINE_int32(iters, 5, "timed iterations per cell");
DEFINE_int32(warmup, 1, "untimed iterations per cell");
DEFINE_double(timeout, 60, "progress timeout in seconds");

namespace {

int64_t ParseBytes(const std::string& s) {
  int64_t v = std::atoll(s.c_str());
  switch (s.empty() ? ' ' : s.back()) {
    case 'K':
      return v << 10;
    case 'M':
      return v << 20;
    case 'G':
      return v << 30;
    default:
      return v;
  }
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

int Fail(const gyre::Status& s) {
  std::fprintf(stderr, "gyre-hier-bench: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  using namespace gyre;
  auto id = job::ResolveIdentity({}, job::ProcessEnvironment());
  if (!id.ok()) return Fail(id.status());
  job::JoinOptions jo;
  jo.identity = *id;
  jo.comm.timeout = Seconds(FLAGS_timeout);
  auto joined = job::JoinJob(jo);
  if (!joined.ok()) return Fail(joined.status());
  Communicator& comm = *joined->comm;
  const int p = comm.size();
  const int rank = comm.rank();
  const int local_size = job::RanksPerHost(joined->peers);
  if (rank == 0) {
    std::printf("# %d ranks, %d per host (%s), %d timed iterations\n", p, local_size,
                local_size > 0 ? "hierarchical uses it" : "not uniform: default grid", FLAGS_iters);
    std::printf("%-10s %-13s %12s %10s %10s\n", "bytes", "algorithm", "time_ms", "algbw_GBps",
                "busbw_GBps");
  }
  for (const std::string& size : Split(FLAGS_sizes)) {
    const int64_t bytes = ParseBytes(size);
    const int64_t count = bytes / 4;
    std::vector<float> in(count, static_cast<float>(rank + 1)), out(count);
    for (const std::string& name : Split(FLAGS_algos)) {
      algo::CollectiveSpec spec =
          algo::MakeSpec(algo::Collective::kAllreduce, count, DataType::kFloat32);
      std::string label = name;
      if (name == "auto") {
        // What automatic choice makes of this shape and size (it learnt the shape itself).
        auto resolved = comm.Resolve(spec, {});
        if (!resolved.ok()) return Fail(resolved.status());
        label = "auto:" + std::string(algo::AlgorithmName(resolved->algorithm));
      } else {
        auto algorithm = algo::ParseAlgorithm(name);
        if (!algorithm.ok()) return Fail(algorithm.status());
        spec.algorithm = *algorithm;
        if (*algorithm == algo::Algorithm::kHierarchical) spec.local_size = local_size;
      }
      for (int i = 0; i < FLAGS_warmup; ++i) {
        Status s = comm.Run(spec, in.data(), out.data());
        if (!s.ok()) return Fail(s);
      }
      const float want = static_cast<float>(p) * (p + 1) / 2;
      for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 4096)) {
        if (out[i] != want) {
          std::fprintf(stderr, "rank %d: %s %s: element %lld is %g, want %g\n", rank, name.c_str(),
                       size.c_str(), static_cast<long long>(i), out[i], want);
          return 1;
        }
      }
      Status b = comm.Barrier();
      if (!b.ok()) return Fail(b);
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < FLAGS_iters; ++i) {
        Status s = comm.Run(spec, in.data(), out.data());
        if (!s.ok()) return Fail(s);
      }
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
          FLAGS_iters;
      if (rank == 0) {
        const double algbw = bytes / secs / 1e9;
        std::printf("%-10lld %-13s %12.2f %10.3f %10.3f\n", static_cast<long long>(bytes),
                    label.c_str(), secs * 1e3, algbw, algbw * 2.0 * (p - 1) / p);
        std::fflush(stdout);
      }
    }
  }
  if (rank == 0) std::printf("hier-bench: all results checked\n");
  return 0;
}
