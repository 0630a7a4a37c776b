// gyre-test-client: a program for the multi-process tests. It connects through
// gyre::Comm::FromEnvironment (daemon or embedded, as gyrerun set up), runs every collective
// with every algorithm and checks each result against the sequential reference, again with
// buffers from Comm::AllocBuffer (through the daemon: used in place, nothing staged), then
// optionally loops allreduces (to be killed mid-loop) or kills itself.
#include <gflags/gflags.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "client/include/gyre/gyre.h"
#include "core/algo/collective.h"
#include "core/base/large_memory.h"
#include "core/base/tool_flags.h"
#include "core/comm/selfcheck.h"

DEFINE_bool(check, true, "run and verify every collective x algorithm");
DEFINE_double(loop_seconds, 0,
              "then loop allreduces for about this long: the loop's own allreduce carries "
              "whether any rank's time is up, so every rank makes the same number of calls "
              "(not guaranteed past a fault this program injects, or a call that failed)");
DEFINE_int32(loop_iters, 0, "or exactly this many allreduces (every rank the same number)");
DEFINE_bool(say_looping, false,
            "print 'rank R: looping' to stdout once the loop's first call succeeded");
DEFINE_int32(die_rank, -1, "this rank SIGKILLs itself during the loop");
DEFINE_int32(die_after, 20, "... after this many loop iterations");
DEFINE_int32(stop_rank, -1,
             "this rank SIGSTOPs itself after --die_after loop iterations (until a SIGCONT)");
DEFINE_int32(skip_rank, -1, "this rank does not make the loop's call at --fault_at (sleeps)");
DEFINE_int32(mismatch_rank, -1, "this rank makes a different call at --fault_at");
DEFINE_string(mismatch_kind, "op", "op | count | dtype | root | reduce_op | broadcast_root");
DEFINE_int32(refuse_rank, -1,
             "this rank passes a null input at --fault_at, a call it refuses; every rank goes on "
             "after that call's error and ends with a checked int32 allreduce");
DEFINE_bool(keep_going, false,
            "go on after a loop call fails (its error is printed); exit 1 at the end if any did");
DEFINE_bool(close, false,
            "end with Comm::Close (printing \"rank R: closed\", or \"rank R: close failed: ...\" "
            "and exit 1)");
DEFINE_int32(alltoall_for_close_rank, -1,
             "with --close, this rank makes a one-byte pairwise alltoall of its own where the "
             "others close (printing \"rank R: alltoall ok\" or \"rank R: alltoall failed: ...\")");
DEFINE_bool(refuse_call_misuse, false,
            "call Comm::RefuseCall with an unknown collective name (printing what it returned), "
            "then a checked int32 allreduce; with --close, RefuseCall again after the close");
DEFINE_bool(free_while_async, false,
            "rank 1 sleeps 0.5 s, so rank 0's asynchronous allreduce on an AllocBuffer block is "
            "still queued when rank 0 frees the block and fills a new one; prints whether the "
            "call was exact and the new block untouched");
DEFINE_bool(two_divergences, false,
            "three calls, each error printed and the program going on: rank 0 calls with another "
            "dtype, then all alike, then rank 2 with another count (\"rank R: call N: ...\")");
DEFINE_int32(refused_root_rounds, 0,
             "this many rounds of: a gather to rank 0 that rank 0 refuses (a null output) and the "
             "others make, then two checked int32 allreduces; prints \"rank R: round K: "
             "gather|next|after: ...\" and ends with a barrier");
DEFINE_int32(gather_divergence_rounds, 0,
             "this many rounds of: a gather to rank 0 where rank 1 gives 0 elements and the others "
             "2 (a divergence only the root sees), then two checked int32 allreduces; prints "
             "\"rank R: round K: gather|next|after: ...\" and ends with a barrier");
DEFINE_bool(refuse_while_tuning, false,
            "40 rounds of a 1 MiB float32 allreduce (a tuned size under --tune) and a 6-element "
            "int64 one, both checked; rank 0 refuses the float call of round 3 (Comm::RefuseCall). "
            "Prints each failure and \"rank R: tuning rounds: F failed, W wrong\"");
DEFINE_int32(recv_rank, -1,
             "at --fault_at this rank receives from the next rank (tag 7, a 60 s timeout) instead "
             "of making the loop's call: the others wait in the collective, it in the receive");
DEFINE_bool(all_recv, false,
            "at --fault_at every rank receives from the next one as --recv_rank does: a deadlock "
            "of receives, with no rank inside a collective");
DEFINE_int32(fault_at, 10,
             "loop iteration of --skip_rank / --mismatch_rank / --refuse_rank / --recv_rank");
DEFINE_double(skip_seconds, 60, "how long the skipping rank sleeps");
DEFINE_bool(recreate_after_close, false,
            "at the end, after Close, make a new Comm from the same environment and print "
            "'rank R: recreated after close: <status> in <seconds> s'");
DEFINE_double(recreate_delay, 0, "seconds to wait before --recreate_after_close's new Comm");
DEFINE_bool(second_comm, false,
            "after joining, make a second Comm from the same environment and print "
            "'rank R: second comm: <status>' (a rank has one communicator)");
DEFINE_bool(bad_options, false,
            "after joining, make an allreduce with Options::deterministic = 7 (not -1, 0 or 1) "
            "and print 'rank R: deterministic 7: <status>'");
DEFINE_bool(outlive, false,
            "post a receive nobody answers and a send, destroy the Comm, then wait on both: "
            "the send's Work reports how it ended, the receive's Aborted (no use of the "
            "destroyed Comm)");
DEFINE_bool(report_defaults, false,
            "print how many messages a chain broadcast of 16 KiB sent and which algorithm an "
            "automatic allreduce ran, to show the job's call defaults (segments, "
            "deterministic) reached this rank, and how many algorithms 12 automatic broadcasts "
            "ran (online tuning)");

namespace {

gyre::Status RunCollective(gyre::Comm& comm, const gyre::algo::CollectiveSpec& spec, const void* in,
                           void* outp, const gyre::Options& o) {
  using gyre::algo::Collective;
  const int64_t count = spec.count;
  switch (spec.collective) {
    case Collective::kAllreduce:
      return comm.Allreduce(in, outp, count, spec.dtype, spec.op, o);
    case Collective::kBroadcast:
      return comm.Broadcast(in, outp, count, spec.dtype, spec.root, o);
    case Collective::kReduce:
      return comm.Reduce(in, outp, count, spec.dtype, spec.op, spec.root, o);
    case Collective::kAllgather:
      return comm.Allgather(in, outp, count, spec.dtype, o);
    case Collective::kReduceScatter:
      return comm.ReduceScatter(in, outp, count, spec.dtype, spec.op, o);
    case Collective::kAlltoall:
      return comm.Alltoall(in, outp, count, spec.dtype, o);
    case Collective::kGather:
      return comm.Gather(in, outp, count, spec.dtype, spec.root, o);
    case Collective::kScatter:
      return comm.Scatter(in, outp, count, spec.dtype, spec.root, o);
    case Collective::kBarrier:
      return comm.Barrier(o);
  }
  return gyre::InvalidArgumentError("unknown collective");
}

// Every collective (automatic choice) with its buffers inside blocks from AllocBuffer, at
// offsets that are not page-aligned: exact results and, through the daemon, no byte staged.
// Then one call with heap buffers, which the daemon Comm stages, and the refusals of
// FreeBuffer. Returns the number of failures.
int CheckAllocatedBuffers(gyre::Comm& comm) {
  using namespace gyre;
  const int p = comm.size();
  const int r = comm.rank();
  const bool daemon = comm.mode() == "daemon";
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "rank %d: allocated buffers: %s\n", r, what.c_str());
    ++failures;
  };
  constexpr size_t kBlock = 1 << 20;
  auto in_block = comm.AllocBuffer(kBlock);
  auto out_block = comm.AllocBuffer(kBlock);
  if (!in_block.ok() || !out_block.ok()) {
    fail("AllocBuffer: " + in_block.status().ToString() + " " + out_block.status().ToString());
    return failures;
  }
  auto* in_base = static_cast<unsigned char*>(*in_block) + 24;
  auto* out_base = static_cast<unsigned char*>(*out_block) + 40;
  for (int c = 0; c < algo::kNumCollectives; ++c) {
    algo::CollectiveSpec spec;
    spec.collective = static_cast<algo::Collective>(c);
    spec.world_size = p;
    spec.count = 777 + p;
    spec.dtype = algo::IsReducing(spec.collective) ? DataType::kInt64 : DataType::kFloat32;
    spec.op = ReduceOp::kSum;
    spec.root = p - 1;
    std::vector<std::vector<unsigned char>> inputs;
    for (int q = 0; q < p; ++q) inputs.push_back(MakeInput(spec, q));
    const std::vector<unsigned char> want = Reference(spec, inputs, r);
    std::memcpy(in_base, inputs[r].data(), inputs[r].size());
    std::memset(out_base, 0xab, want.size());
    Status s = RunCollective(comm, spec, inputs[r].empty() ? nullptr : in_base,
                             want.empty() ? nullptr : out_base, Options{});
    std::vector<unsigned char> got(out_base, out_base + want.size());
    const std::string diff = s.ok() ? FirstDifference(spec, got, want) : s.ToString();
    if (!diff.empty()) fail(spec.ToString() + ": " + diff);
    if (comm.last().bytes_staged != 0) {
      fail(spec.ToString() + ": staged " + std::to_string(comm.last().bytes_staged) + " bytes");
    }
    if (!s.ok()) return failures;  // the ranks are out of step now
  }
  // In place inside a block.
  const int64_t n = 5000;
  auto* v = reinterpret_cast<int32_t*>(in_base);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i * 3 + r);
  Status s = comm.Allreduce(v, v, n, DataType::kInt32, ReduceOp::kSum);
  for (int64_t i = 0; i < n && s.ok(); ++i) {
    const int64_t expect = p * i * 3 + static_cast<int64_t>(p) * (p - 1) / 2;
    if (v[i] != expect) {
      fail("in-place allreduce element " + std::to_string(i) + " is " + std::to_string(v[i]));
      break;
    }
  }
  if (!s.ok()) fail("in-place allreduce: " + s.ToString());
  // Heap buffers: staged through the daemon, in and out.
  std::vector<int32_t> heap(n, r + 1), heap_out(n);
  s = comm.Allreduce(heap.data(), heap_out.data(), n, DataType::kInt32, ReduceOp::kSum);
  if (!s.ok() || heap_out[n - 1] != p * (p + 1) / 2) fail("heap allreduce: " + s.ToString());
  const int64_t staged = daemon ? 2 * n * 4 : 0;
  if (comm.last().bytes_staged != staged) {
    fail("heap allreduce staged " + std::to_string(comm.last().bytes_staged) + " bytes, not " +
         std::to_string(staged));
  }
  // FreeBuffer refuses what AllocBuffer did not give, and a second free.
  if (comm.FreeBuffer(heap.data()).code() != StatusCode::kInvalidArgument) {
    fail("FreeBuffer of a heap pointer was not refused");
  }
  if (!comm.FreeBuffer(*in_block).ok() || !comm.FreeBuffer(*out_block).ok()) fail("FreeBuffer");
  if (comm.FreeBuffer(*in_block).code() != StatusCode::kInvalidArgument) {
    fail("a second FreeBuffer of one block was not refused");
  }
  // More memory than the host has available is refused in both modes, saying so: granted
  // untouched, its first use would end in the OOM killer. (Above MemTotal, where the
  // kernel itself might refuse, it would still be granted by an overcommitting one.)
  if (const std::optional<uint64_t> available = AvailableMemory()) {
    auto too_big = comm.AllocBuffer(static_cast<size_t>(*available + (uint64_t{1} << 30)));
    if (too_big.ok()) {
      (void)comm.FreeBuffer(*too_big);
      fail("AllocBuffer of 1 GiB more than available was granted");
    } else if (too_big.status().code() != StatusCode::kResourceExhausted ||
               too_big.status().message().find("available") == std::string::npos) {
      fail("AllocBuffer of more than available: " + too_big.status().ToString());
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  gyre::ParseToolFlags(&argc, &argv,
                       "gyre-test-client [flags]: run under gyrerun (or with gyre's environment "
                       "set); checks every collective, then loops or injects a fault");
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
  if (FLAGS_second_comm) {
    auto second = Comm::FromEnvironment();
    std::printf("rank %d: second comm: %s\n", r,
                second.ok() ? "ok" : second.status().ToString().c_str());
    std::fflush(stdout);
  }
  if (FLAGS_bad_options) {
    Options seven;
    seven.deterministic = 7;
    int32_t v[2] = {r, 1};
    const Status s = comm.Allreduce(v, v, 2, DataType::kInt32, ReduceOp::kSum, seven);
    std::printf("rank %d: deterministic 7: %s\n", r, s.ok() ? "ok" : s.ToString().c_str());
    std::fflush(stdout);
  }
  if (FLAGS_refuse_call_misuse) {
    const Status unknown = comm.RefuseCall("frobnicate", InvalidArgumentError("a test's reason"));
    std::printf("rank %d: refuse unknown: %s\n", r, unknown.ToString().c_str());
    // The unknown name took no place in the sequence: this call pairs with the others' first.
    int32_t v[2] = {r + 1, -(r + 1)};
    const Status s = comm.Allreduce(v, v, 2, DataType::kInt32, ReduceOp::kSum);
    const int32_t want = p * (p + 1) / 2;
    std::printf("rank %d: allreduce after it: %s\n", r,
                !s.ok()                         ? s.ToString().c_str()
                : v[0] == want && v[1] == -want ? "exact"
                                                : "WRONG");
    std::fflush(stdout);
  }
  if (FLAGS_refuse_while_tuning) {
    constexpr int64_t n = 1 << 18;
    std::vector<float> x(n);
    int failed = 0, wrong = 0;
    for (int k = 0; k < 40; ++k) {
      std::fill(x.begin(), x.end(), static_cast<float>(r + k));
      const Status s =
          r == 0 && k == 3
              ? comm.RefuseCall("allreduce", InvalidArgumentError("a test's refusal"))
              : comm.Allreduce(x.data(), x.data(), n, DataType::kFloat32, ReduceOp::kSum);
      const float want = static_cast<float>(p * k + p * (p - 1) / 2);
      if (!s.ok()) {
        ++failed;
        std::printf("rank %d: round %d float: %s\n", r, k, s.ToString().c_str());
      } else if (x[0] != want || x[n - 1] != want) {
        ++wrong;
      }
      int64_t m[6];
      std::fill(m, m + 6, r + 1);
      const Status t = comm.Allreduce(m, m, 6, DataType::kInt64, ReduceOp::kSum);
      if (!t.ok()) {
        ++failed;
        std::printf("rank %d: round %d int64: %s\n", r, k, t.ToString().c_str());
      } else if (std::any_of(m, m + 6, [&](int64_t v) { return v != p * (p + 1) / 2; })) {
        ++wrong;
        std::printf("rank %d: round %d int64 WRONG: %lld\n", r, k, static_cast<long long>(m[0]));
      }
    }
    std::printf("rank %d: tuning rounds: %d failed, %d wrong\n", r, failed, wrong);
    std::fflush(stdout);
  }
  // Rounds of a gather to rank 0 that goes wrong on one side, then two checked allreduces:
  // --refused_root_rounds (rank 0 refuses: a null output) or --gather_divergence_rounds (rank
  // 1 gives 0 elements, a divergence only the root sees).
  const bool refused_root = FLAGS_refused_root_rounds > 0;
  const int gather_rounds =
      refused_root ? FLAGS_refused_root_rounds : FLAGS_gather_divergence_rounds;
  for (int k = 0; k < gather_rounds; ++k) {
    const int64_t count = !refused_root && r == 1 ? 0 : 2;
    std::vector<int32_t> in(2, r), out(static_cast<size_t>(2 * p), -1);
    int32_t* gathered_to =
        r == 0 ? (refused_root ? nullptr : out.data()) : (refused_root ? out.data() : nullptr);
    const Status gathered = comm.Gather(in.data(), gathered_to, count, DataType::kInt32, 0);
    std::printf("rank %d: round %d: gather: %s\n", r, k,
                gathered.ok() ? "ok" : gathered.ToString().c_str());
    const char* names[2] = {"next", "after"};
    for (const char* name : names) {
      std::vector<int32_t> v(4, r + 1);
      const Status s = comm.Allreduce(v.data(), v.data(), 4, DataType::kInt32, ReduceOp::kSum);
      const bool exact =
          std::all_of(v.begin(), v.end(), [&](int32_t x) { return x == p * (p + 1) / 2; });
      std::printf("rank %d: round %d: %s: %s\n", r, k, name,
                  !s.ok() ? s.ToString().c_str()
                  : exact ? "ok"
                          : "ok but WRONG");
    }
    std::fflush(stdout);
  }
  if (gather_rounds > 0) {
    const Status met = comm.Barrier();
    std::printf("rank %d: barrier after the rounds: %s\n", r,
                met.ok() ? "ok" : met.ToString().c_str());
    std::fflush(stdout);
  }
  if (FLAGS_two_divergences) {
    std::vector<int32_t> v(8, 1);
    const DataType first = r == 0 ? DataType::kFloat32 : DataType::kInt32;
    const int64_t third = r == 2 ? 9 : 8;
    v.resize(9, 1);
    const Status calls[3] = {
        comm.Allreduce(v.data(), v.data(), 8, first, ReduceOp::kSum),
        comm.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum),
        comm.Allreduce(v.data(), v.data(), third, DataType::kInt32, ReduceOp::kSum)};
    for (int k = 0; k < 3; ++k) {
      std::printf("rank %d: call %d: %s\n", r, k + 1,
                  calls[k].ok() ? "ok" : calls[k].ToString().c_str());
    }
    std::fflush(stdout);
    // No rank leaves while another may still be asking it about the third call.
    const Status met = comm.Barrier();
    std::printf("rank %d: barrier after them: %s\n", r, met.ok() ? "ok" : met.ToString().c_str());
    std::fflush(stdout);
  }
  if (FLAGS_free_while_async) {
    constexpr int64_t n = 1 << 20;  // 4 MiB: a block the allocator may hand out again
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    float x[16];
    std::fill(x, x + 16, 1.0f);
    // Something ahead in the queue, so the call below waits there too.
    std::shared_ptr<Work> ahead = comm.AllreduceAsync(x, x, 16, DataType::kFloat32, ReduceOp::kSum);
    StatusOr<void*> first = comm.AllocBuffer(n * sizeof(int32_t));
    if (!first.ok()) return 1;
    auto* a = static_cast<int32_t*>(*first);
    std::fill(a, a + n, r + 1);
    std::shared_ptr<Work> call = comm.AllreduceAsync(a, a, n, DataType::kInt32, ReduceOp::kSum);
    const Status freed_status = comm.FreeBuffer(a);
    const bool done_at_free = call->Done();
    StatusOr<void*> second = comm.AllocBuffer(n * sizeof(int32_t));
    if (!second.ok()) return 1;
    auto* b = static_cast<int32_t*>(*second);
    std::fill(b, b + n, 1000);
    const Status waited = call->Wait();
    const Status ahead_waited = ahead->Wait();
    (void)ahead_waited;  // the call above reports what matters
    int64_t changed = 0;
    for (int64_t i = 0; i < n; ++i) changed += b[i] != 1000;
    std::printf(
        "rank %d: free while async: free %s, call done when FreeBuffer returned: %s, "
        "call %s, new block changed in %lld elements\n",
        r, freed_status.ok() ? "ok" : freed_status.ToString().c_str(), done_at_free ? "yes" : "no",
        waited.ok() ? "ok" : waited.ToString().c_str(), static_cast<long long>(changed));
    std::fflush(stdout);
    comm.FreeBuffer(b).IgnoreError();
  }
  if (FLAGS_outlive) {
    int32_t got = 0;
    const int32_t sent = 7;
    const int peer = (r + 1) % p;
    std::shared_ptr<Work> recv = comm.RecvAsync(&got, 1, DataType::kInt32, peer, /*tag=*/5);
    std::shared_ptr<Work> send = comm.SendAsync(&sent, 1, DataType::kInt32, peer, /*tag=*/6);
    Status barrier = comm.Barrier();  // every rank has posted before any Comm goes
    comm_or->reset();
    const Status rs = recv->Wait();
    const Status ss = send->Wait();
    std::printf("rank %d: barrier %s; after the Comm was destroyed: recv %s; send %s\n", r,
                barrier.ToString().c_str(), rs.ToString().c_str(), ss.ToString().c_str());
    std::fflush(stdout);
    return barrier.ok() && rs.code() == StatusCode::kAborted ? 0 : 1;
  }
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
          Status s = RunCollective(comm, spec, in, outp, o);
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
    failures += CheckAllocatedBuffers(comm);
    std::printf("rank %d: %s\n", r, failures == 0 ? "all collectives ok" : "FAILURES");
    std::fflush(stdout);
  }
  if (FLAGS_report_defaults) {
    std::vector<float> buf(4096, static_cast<float>(r));
    Options chain;
    chain.algorithm = "chain";
    Status s = comm.Broadcast(buf.data(), buf.data(), static_cast<int64_t>(buf.size()),
                              DataType::kFloat32, 0, chain);
    if (s.ok()) {
      std::printf("rank %d: chain broadcast sent %lld messages, received %lld\n", r,
                  static_cast<long long>(comm.last().msgs_sent),
                  static_cast<long long>(comm.last().msgs_recv));
      s = comm.Allreduce(buf.data(), buf.data(), 100, DataType::kFloat32, ReduceOp::kSum);
    }
    if (s.ok()) std::printf("rank %d: allreduce ran %s\n", r, comm.last().algorithm.c_str());
    // Online tuning tries more than one algorithm on the first calls of a size (1 MiB and
    // up).
    std::set<std::string> ran;
    std::vector<float> big(1 << 18, static_cast<float>(r));
    for (int i = 0; s.ok() && i < 12; ++i) {
      s = comm.Broadcast(big.data(), big.data(), static_cast<int64_t>(big.size()),
                         DataType::kFloat32, 0);
      ran.insert(comm.last().algorithm);
    }
    if (s.ok()) std::printf("rank %d: 12 automatic broadcasts ran %zu algorithms\n", r, ran.size());
    // What a program's own layer (the Python one) reads, in either mode.
    for (const char* name :
         {"GYRE_TIMEOUT_MS", "GYRE_SEGMENT_BYTES", "GYRE_DETERMINISTIC", "GYRE_TUNE"}) {
      const char* v = std::getenv(name);
      std::printf("rank %d: env %s=%s\n", r, name, v ? v : "(unset)");
    }
    std::fflush(stdout);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", r, s.ToString().c_str());
      return 1;
    }
  }
  if (FLAGS_loop_seconds > 0 || FLAGS_loop_iters > 0) {
    std::vector<float> g(1 << 16, 1.0f);
    const auto end =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(FLAGS_loop_seconds);
    // Timed: the last element of every loop allreduce is 1 on a rank whose time is up and 0
    // elsewhere, so after the call every rank sees whether any rank's was, and all stop after
    // the same call. Each rank stopping on its own clock made one more call than another,
    // which then failed as a dead peer.
    const bool timed = FLAGS_loop_iters <= 0;
    bool time_up = false;
    for (int iter = 0; timed ? !time_up : iter < FLAGS_loop_iters; ++iter) {
      if (timed) g.back() = std::chrono::steady_clock::now() >= end ? 1.0f : 0.0f;
      if (r == FLAGS_die_rank && iter == FLAGS_die_after) ::raise(SIGKILL);
      if (r == FLAGS_stop_rank && iter == FLAGS_die_after) ::raise(SIGSTOP);
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
        } else if (k == "broadcast_root") {  // everyone else calls broadcast(root=0)
          s = comm.Broadcast(g.data(), g.data(), n, DataType::kFloat32, 1);
        } else {  // root: everyone else calls reduce(root=0) for this kind
          s = comm.Reduce(g.data(), g.data(), n, DataType::kFloat32, ReduceOp::kSum, 1);
        }
      } else if ((r == FLAGS_recv_rank || FLAGS_all_recv) && iter == FLAGS_fault_at) {
        std::printf("rank %d receives instead of call %d\n", r, iter);
        std::fflush(stdout);
        gyre::Options patient;  // outlasts the others' progress timeout: they give up first
        patient.timeout = std::chrono::seconds(60);
        s = comm.Recv(g.data(), 4, DataType::kFloat32, (r + 1) % comm.size(), 7, patient);
      } else if (r == FLAGS_refuse_rank && iter == FLAGS_fault_at) {
        s = comm.Allreduce(nullptr, g.data(), static_cast<int64_t>(g.size()), DataType::kFloat32,
                           ReduceOp::kAvg);
      } else if (FLAGS_mismatch_kind == "broadcast_root" && FLAGS_mismatch_rank >= 0 &&
                 iter == FLAGS_fault_at) {
        s = comm.Broadcast(g.data(), g.data(), static_cast<int64_t>(g.size()), DataType::kFloat32,
                           0);
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
        if (FLAGS_refuse_rank >= 0 && iter == FLAGS_fault_at) continue;
        if (FLAGS_keep_going) {
          ++failures;
          continue;
        }
        return 1;
      }
      if (timed && g.back() > 0) time_up = true;
      if (FLAGS_say_looping && iter == 0) {
        std::printf("rank %d: looping\n", r);
        std::fflush(stdout);
      }
    }
    if (FLAGS_refuse_rank >= 0) {
      // Had the refused call not taken its place, this would meet another rank's earlier call.
      const int p = comm.size();
      const int32_t want = p * (p + 1) / 2;
      int32_t v[3] = {r + 1, 1000 * (r + 1), -(r + 1)};
      Status s = comm.Allreduce(v, v, 3, DataType::kInt32, ReduceOp::kSum);
      const bool exact = s.ok() && v[0] == want && v[1] == 1000 * want && v[2] == -want;
      std::printf("rank %d: the call after the refusal: %s (%d %d %d, want %d %d %d)\n", r,
                  exact    ? "exact"
                  : s.ok() ? "WRONG"
                           : s.ToString().c_str(),
                  v[0], v[1], v[2], want, 1000 * want, -want);
      std::fflush(stdout);
      if (!exact) return 1;
    }
  }
  if (FLAGS_close && r == FLAGS_alltoall_for_close_rank) {
    // The same shape as Close's own exchange: it must not pair with the others' Close.
    std::vector<uint8_t> sent(static_cast<size_t>(comm.size()), 1);
    std::vector<uint8_t> heard(sent.size(), 0);
    gyre::Options pairwise;
    pairwise.algorithm = "pairwise";
    const Status s = comm.Alltoall(sent.data(), heard.data(), 1, DataType::kUint8, pairwise);
    if (!s.ok()) {
      std::fprintf(stderr, "rank %d: alltoall failed: %s\n", r, s.ToString().c_str());
      return 1;
    }
    std::printf("rank %d: alltoall ok\n", r);
    std::fflush(stdout);
  } else if (FLAGS_close) {
    const Status closed = comm.Close();
    if (!closed.ok()) {
      std::fprintf(stderr, "rank %d: close failed: %s\n", r, closed.ToString().c_str());
      return 1;
    }
    std::printf("rank %d: closed\n", r);
    if (FLAGS_refuse_call_misuse) {
      const Status after = comm.RefuseCall("allreduce", InvalidArgumentError("a test's reason"));
      std::printf("rank %d: refuse after close: %s\n", r, after.ToString().c_str());
    }
    std::fflush(stdout);
  }
  if (FLAGS_recreate_after_close) {
    comm_or->reset();  // through the daemon, its gyred exits now
    std::this_thread::sleep_for(std::chrono::duration<double>(FLAGS_recreate_delay));
    const auto t0 = std::chrono::steady_clock::now();
    auto again = Comm::FromEnvironment();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("rank %d: recreated after close: %s in %.1f s\n", r,
                again.ok() ? "ok" : again.status().ToString().c_str(), seconds);
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}
