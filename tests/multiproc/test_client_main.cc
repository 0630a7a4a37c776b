// gyre-test-client: a program for the multi-process tests. It connects through
// gyre::Comm::FromEnvironment (daemon or embedded, as gyrerun set up), runs every collective
// with every algorithm and checks each result against the sequential reference, then
// optionally loops allreduces (to be killed mid-loop) or kills itself.
#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "client/include/gyre/gyre.h"
#include "core/algo/collective.h"
#include "core/comm/selfcheck.h"

DEFINE_bool(check, true, "run and verify every collective x algorithm");
DEFINE_double(loop_seconds, 0, "then loop allreduces for this long");
DEFINE_int32(loop_iters, 0, "or exactly this many allreduces (every rank the same number)");
DEFINE_int32(die_rank, -1, "this rank SIGKILLs itself during the loop");
DEFINE_int32(die_after, 20, "... after this many loop iterations");
DEFINE_int32(skip_rank, -1, "this rank does not make the loop's call at --fault_at (sleeps)");
DEFINE_int32(mismatch_rank, -1, "this rank makes a different call at --fault_at");
DEFINE_string(mismatch_kind, "op", "op | count | dtype | root | reduce_op");
DEFINE_int32(fault_at, 10, "loop iteration of --skip_rank / --mismatch_rank");
DEFINE_double(skip_seconds, 60, "how long the skipping rank sleeps");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  using namespace gyre;
  auto comm_or = Comm::FromEnvironment();
  if (!comm_or.ok()) {
    std::fprintf(stderr, "gyre-test-client: %s\n", comm_or.status().ToString().c_str());
    return 3;
  }
  Comm& comm = **comm_or;
  const int p = comm.size();
  const int r = comm.rank();
  std::printf("client rank %d of %d pid=%d mode=%s\n", r, p, static_cast<int>(getpid()),
              comm.mode().c_str());
  std::fflush(stdout);
  int failures = 0;
  if (FLAGS_check) {
    for (int c = 0; c < algo::kNumCollectives; ++c) {
      const auto coll = static_cast<algo::Collective>(c);
      for (algo::Algorithm a : algo::AlgorithmsFor(coll)) {
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1000 + p}}) {
          algo::CollectiveSpec spec;
          spec.collective = coll;
          spec.algorithm = a;
          spec.world_size = p;
          spec.count = count;
          spec.dtype = algo::IsReducing(coll) ? DataType::kInt64 : DataType::kFloat32;
          spec.op = ReduceOp::kSum;
          spec.root = p - 1;
          std::vector<std::vector<unsigned char>> inputs;
          for (int q = 0; q < p; ++q) inputs.push_back(MakeInput(spec, q));
          std::vector<unsigned char> want = Reference(spec, inputs, r);
          std::vector<unsigned char> out(want.size());
          Options o;
          o.algorithm = algo::AlgorithmName(a);
          const void* in = inputs[r].empty() ? nullptr : inputs[r].data();
          void* outp = out.empty() ? nullptr : out.data();
          Status s;
          switch (coll) {
            case algo::Collective::kAllreduce:
              s = comm.Allreduce(in, outp, count, spec.dtype, spec.op, o);
              break;
            case algo::Collective::kBroadcast:
              s = comm.Broadcast(in, outp, count, spec.dtype, spec.root, o);
              break;
            case algo::Collective::kReduce:
              s = comm.Reduce(in, outp, count, spec.dtype, spec.op, spec.root, o);
              break;
            case algo::Collective::kAllgather:
              s = comm.Allgather(in, outp, count, spec.dtype, o);
              break;
            case algo::Collective::kReduceScatter:
              s = comm.ReduceScatter(in, outp, count, spec.dtype, spec.op, o);
              break;
            case algo::Collective::kAlltoall:
              s = comm.Alltoall(in, outp, count, spec.dtype, o);
              break;
            case algo::Collective::kGather:
              s = comm.Gather(in, outp, count, spec.dtype, spec.root, o);
              break;
            case algo::Collective::kScatter:
              s = comm.Scatter(in, outp, count, spec.dtype, spec.root, o);
              break;
            case algo::Collective::kBarrier:
              s = comm.Barrier(o);
              break;
          }
          std::string diff = s.ok() ? FirstDifference(spec, out, want) : s.ToString();
          if (!diff.empty()) {
            std::fprintf(stderr, "rank %d: %s: %s\n", r, spec.ToString().c_str(), diff.c_str());
            ++failures;
          } else if (comm.last().algorithm != algo::AlgorithmName(a)) {
            std::fprintf(stderr, "rank %d: %s ran %s\n", r, spec.ToString().c_str(),
                         comm.last().algorithm.c_str());
            ++failures;
          }
          if (!s.ok()) return 1;  // the ranks are out of step now
        }
      }
    }
    // An asynchronous allreduce completes with the right answer.
    std::vector<int32_t> v(4096, r + 1), w(4096);
    auto work = comm.AllreduceAsync(v.data(), w.data(), 4096, DataType::kInt32, ReduceOp::kSum);
    Status ws = work->Wait(Deadline::After(*SteadyClock::Get(), Seconds(30)));
    if (!ws.ok() || w[4095] != p * (p + 1) / 2) {
      std::fprintf(stderr, "rank %d: async allreduce: %s\n", r, ws.ToString().c_str());
      ++failures;
    }
    // Asynchronous calls complete in submission order with the right answers.
    std::vector<int32_t> bin(8, r == 0 ? 42 : -1), bout(8), gin(3, r), gout(3 * p);
    auto b = comm.BroadcastAsync(bin.data(), bout.data(), 8, DataType::kInt32, 0);
    auto g = comm.AllgatherAsync(gin.data(), gout.data(), 3, DataType::kInt32);
    Status bs = b->Wait(Deadline::After(*SteadyClock::Get(), Seconds(30)));
    Status gs = g->Wait(Deadline::After(*SteadyClock::Get(), Seconds(30)));
    if (!bs.ok() || !gs.ok() || bout[7] != 42 || gout[3 * (p - 1)] != p - 1) {
      std::fprintf(stderr, "rank %d: async broadcast/allgather: %s %s\n", r, bs.ToString().c_str(),
                   gs.ToString().c_str());
      ++failures;
    }
    // Point-to-point around the ring: sends first (they do not wait for their receive),
    // two tags received in the other order than sent, the bytes exact and counted.
    if (p > 1) {
      const int next = (r + 1) % p, prev = (r + p - 1) % p;
      const int64_t n = 300000;
      auto pattern = [](int from, int64_t i, int tag) {
        return static_cast<int32_t>(i * 13 + from * 1000003 + tag * 7);
      };
      std::vector<int32_t> a(n), b(n), got_a(n, 0), got_b(n, 0);
      for (int64_t i = 0; i < n; ++i) {
        a[i] = pattern(r, i, 1);
        b[i] = pattern(r, i, 2);
      }
      auto sa = comm.SendAsync(a.data(), n, DataType::kInt32, next, 1);
      auto sb = comm.SendAsync(b.data(), n, DataType::kInt32, next, 2);
      Status rb = comm.Recv(got_b.data(), n, DataType::kInt32, prev, 2);
      const CallInfo info = comm.last();
      Status ra = comm.Recv(got_a.data(), n, DataType::kInt32, prev, 1);
      const Deadline d = Deadline::After(*SteadyClock::Get(), Seconds(30));
      Status wa = sa->Wait(d), wb = sb->Wait(d);
      bool exact = true;
      for (int64_t i = 0; i < n && exact; ++i) {
        exact = got_a[i] == pattern(prev, i, 1) && got_b[i] == pattern(prev, i, 2);
      }
      if (!rb.ok() || !ra.ok() || !wa.ok() || !wb.ok() || !exact || info.bytes_recv != n * 4 ||
          info.msgs_recv != 1) {
        std::fprintf(stderr, "rank %d: send/recv: %s %s %s %s exact=%d bytes_recv=%lld\n", r,
                     rb.ToString().c_str(), ra.ToString().c_str(), wa.ToString().c_str(),
                     wb.ToString().c_str(), exact ? 1 : 0, static_cast<long long>(info.bytes_recv));
        ++failures;
      }
    }
    std::printf("rank %d: %s\n", r, failures == 0 ? "all collectives ok" : "FAILURES");
    std::fflush(stdout);
  }
  if (FLAGS_loop_seconds > 0 || FLAGS_loop_iters > 0) {
    std::vector<float> g(1 << 16, 1.0f);
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(FLAGS_loop_seconds);
    for (int iter = 0;
         FLAGS_loop_iters > 0 ? iter < FLAGS_loop_iters : std::chrono::steady_clock::now() < end;
         ++iter) {
      if (r == FLAGS_die_rank && iter == FLAGS_die_after) ::raise(SIGKILL);
      if (r == FLAGS_skip_rank && iter == FLAGS_fault_at) {
        std::printf("rank %d skips call %d\n", r, iter);
        std::fflush(stdout);
        std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_skip_seconds));
      }
      Status s;
      if (r == FLAGS_mismatch_rank && iter == FLAGS_fault_at) {
        const std::string& k = FLAGS_mismatch_kind;
        const int64_t n = static_cast<int64_t>(g.size());
        if (k == "op") {
          s = comm.Broadcast(g.data(), g.data(), n, DataType::kFloat32, 0);
        } else if (k == "count") {
          s = comm.Allreduce(g.data(), g.data(), n / 2, DataType::kFloat32, ReduceOp::kAvg);
        } else if (k == "dtype") {
          s = comm.Allreduce(g.data(), g.data(), n, DataType::kInt32, ReduceOp::kSum);
        } else if (k == "reduce_op") {
          s = comm.Allreduce(g.data(), g.data(), n, DataType::kFloat32, ReduceOp::kMax);
        } else {  // root: everyone else calls reduce(root=0) for this kind
          s = comm.Reduce(g.data(), g.data(), n, DataType::kFloat32, ReduceOp::kSum, 1);
        }
      } else if (FLAGS_mismatch_kind == "root" && FLAGS_mismatch_rank >= 0 &&
                 iter == FLAGS_fault_at) {
        s = comm.Reduce(g.data(), g.data(), static_cast<int64_t>(g.size()), DataType::kFloat32,
                        ReduceOp::kSum, 0);
      } else {
        s = comm.Allreduce(g.data(), g.data(), static_cast<int64_t>(g.size()), DataType::kFloat32,
                           ReduceOp::kAvg);
      }
      if (!s.ok()) {
        std::fprintf(stderr, "rank %d: allreduce %d failed: %s\n", r, iter, s.ToString().c_str());
        return 1;
      }
    }
  }
  return failures == 0 ? 0 : 1;
}
