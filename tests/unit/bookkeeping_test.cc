// A call's bookkeeping is built lazily (names only when printed) and kept in reused storage
// (the flight recorder's ring, the monitor's recent calls, the executor's working memory).
// These tests check that what is printed is still right after the storage is reused.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/flight_recorder.h"
#include "core/exec/executor.h"
#include "core/exec/monitor.h"
#include "core/transport/loopback.h"

namespace gyre {
namespace {

OpDesc Desc(algo::Collective c, algo::Algorithm a, int64_t count, DataType dtype) {
  OpDesc d;
  d.collective = static_cast<uint8_t>(c);
  d.algorithm = static_cast<uint8_t>(a);
  d.count = count;
  d.dtype = static_cast<uint8_t>(dtype);
  return d;
}

TEST(OpNameTest, NamesCollectiveSeqAlgorithmAndSize) {
  EXPECT_EQ(
      OpName(Desc(algo::Collective::kAllreduce, algo::Algorithm::kRing, 1024, DataType::kFloat32),
             41),
      "allreduce seq=41 (ring, 4.0 KiB float32)");
  EXPECT_EQ(
      OpName(Desc(algo::Collective::kBroadcast, algo::Algorithm::kBinomial, 3, DataType::kFloat32),
             7),
      "broadcast seq=7 (binomial, 12 B float32)");
  EXPECT_EQ(
      OpName(Desc(algo::Collective::kBarrier, algo::Algorithm::kDissemination, 0, DataType::kUint8),
             2),
      "barrier seq=2 (dissemination)");
  // A descriptor from a corrupt frame still gets a printable name.
  OpDesc bad = Desc(algo::Collective::kAllreduce, algo::Algorithm::kRing, 4, DataType::kFloat32);
  bad.collective = 200;
  bad.dtype = 250;
  EXPECT_EQ(OpName(bad, 3).rfind("operation seq=3 (", 0), 0u) << OpName(bad, 3);
}

TEST(OpContextTest, AnExplicitNameWins) {
  OpContext ctx;
  ctx.seq = 5;
  ctx.desc = Desc(algo::Collective::kAllgather, algo::Algorithm::kBruck, 2, DataType::kInt32);
  EXPECT_EQ(ctx.Name(), "allgather seq=5 (bruck, 8 B int32)");
  ctx.name = "allgather seq=1 (bruck, simulated)";
  EXPECT_EQ(ctx.Name(), "allgather seq=1 (bruck, simulated)");
}

std::vector<std::string> Details(const std::string& dump) {
  std::vector<std::string> out;
  std::regex re(R"re("kind": "([a-z_]+)", "seq": (\d+), "detail": "([^"]*)")re");
  for (auto it = std::sregex_iterator(dump.begin(), dump.end(), re); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1].str() + " " + (*it)[2].str() + " " + (*it)[3].str());
  }
  return out;
}

TEST(FlightRecorderTest, ReusedSlotsKeepEachEventsOwnDetail) {
  FlightRecorder rec(3);
  const OpDesc ar =
      Desc(algo::Collective::kAllreduce, algo::Algorithm::kRing, 256, DataType::kFloat32);
  rec.Record("join", 0, "a detail long enough to live on the heap, not in the string itself");
  rec.RecordOp("op_start", 1, ar);
  rec.Record("op_end", 1, "ok");
  // The ring is full: these overwrite the oldest slots, one of them the long detail's.
  rec.RecordOp("op_start", 2, ar);
  rec.Record("op_end", 2, "DEADLINE_EXCEEDED: no progress");
  EXPECT_EQ(rec.size(), 3u);
  EXPECT_EQ(
      Details(rec.DumpJson(0)),
      (std::vector<std::string>{"op_end 1 ok", "op_start 2 allreduce seq=2 (ring, 1.0 KiB float32)",
                                "op_end 2 DEADLINE_EXCEEDED: no progress"}));
  // A slot that held a name from a descriptor now holds a plain detail, and back.
  rec.Record("verdict", 0, "rank 1 is dead");
  rec.RecordOp("op_start", 3, ar);
  EXPECT_EQ(Details(rec.DumpJson(0)),
            (std::vector<std::string>{"op_end 2 DEADLINE_EXCEEDED: no progress",
                                      "verdict 0 rank 1 is dead",
                                      "op_start 3 allreduce seq=3 (ring, 1.0 KiB float32)"}));
}

// Runs `calls` collectives of assorted shapes on a world of `p` ranks (one thread each) and
// returns every rank's communicator, for their monitors and recorders.
std::vector<std::unique_ptr<Communicator>> RunAssorted(int p, int calls) {
  auto transports = LoopbackHub::CreateWorld(p);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) comms.push_back(std::make_unique<Communicator>(std::move(t)));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      Communicator& c = *comms[r];
      for (int k = 0; k < calls; ++k) {
        // Shapes change from call to call, so the executor's reused storage is resized
        // both ways; every result is checked exactly.
        const int64_t n = 1 + (k * 37) % 300;
        std::vector<int32_t> in(n), out(n, -1);
        std::iota(in.begin(), in.end(), r * 1000);
        if (k % 3 == 0) {
          ASSERT_TRUE(c.Allreduce(in.data(), out.data(), n, DataType::kInt32, ReduceOp::kSum).ok());
          for (int64_t i = 0; i < n; ++i) {
            // sum over ranks q of (q * 1000 + i)
            ASSERT_EQ(out[i], 1000 * p * (p - 1) / 2 + p * i) << "call " << k << " element " << i;
          }
        } else if (k % 3 == 1) {
          std::vector<int32_t> all(n * p, -1);
          ASSERT_TRUE(c.Allgather(in.data(), all.data(), n, DataType::kInt32).ok());
          for (int q = 0; q < p; ++q) {
            for (int64_t i = 0; i < n; ++i) ASSERT_EQ(all[q * n + i], q * 1000 + i);
          }
        } else {
          const int root = k % p;
          std::vector<int32_t> buf = r == root ? in : std::vector<int32_t>(n, -1);
          ASSERT_TRUE(c.Broadcast(buf.data(), buf.data(), n, DataType::kInt32, root).ok());
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(buf[i], root * 1000 + i);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

TEST(MonitorTest, RecentCallsAreTheLastSixteenOldestFirstWithTheirNames) {
  constexpr int kCalls = 21;
  auto comms = RunAssorted(3, kCalls);
  for (auto& c : comms) {
    const OpSnapshot s = c->monitor()->Snapshot();
    EXPECT_FALSE(s.in_op);
    ASSERT_EQ(s.recent.size(), kRecentCalls);
    for (size_t k = 0; k < kRecentCalls; ++k) {
      const CallRecord& r = s.recent[k];
      EXPECT_EQ(r.seq, s.recent[0].seq + k);
      EXPECT_EQ(r.op_name, OpName(r.desc, r.seq));
    }
    EXPECT_EQ(s.recent.back().seq, s.last_completed_seq);
    EXPECT_EQ(s.op_name, s.recent.back().op_name);
    // Call k = kCalls - 1 = 20 is a broadcast (20 % 3 == 2) of 1 + (20 * 37) % 300 = 141
    // int32 elements.
    EXPECT_EQ(s.op_name.substr(0, 10), "broadcast ") << s.op_name;
    EXPECT_NE(s.op_name.find("564 B int32"), std::string::npos) << s.op_name;
    const OpMonitor::Progress pr = c->monitor()->CurrentProgress();
    EXPECT_FALSE(pr.in_op);
    EXPECT_EQ(pr.seq, s.seq);
  }
}

TEST(MonitorTest, FewerCallsThanTheRingHolds) {
  auto comms = RunAssorted(2, 4);
  const OpSnapshot s = comms[0]->monitor()->Snapshot();
  ASSERT_EQ(s.recent.size(), 4u);
  EXPECT_EQ(s.recent.front().op_name.substr(0, 10), "allreduce ");
  EXPECT_EQ(s.recent.back().seq, s.last_completed_seq);
}

TEST(MonitorTest, NoCallYetMeansNoName) {
  auto comms = RunAssorted(2, 0);
  const OpSnapshot s = comms[1]->monitor()->Snapshot();
  EXPECT_TRUE(s.recent.empty());
  EXPECT_TRUE(s.op_name.empty());
}

// A call stopped by another rank's abort fails with that rank's verdict, which the failure
// handler passes on; a call that failed on its own (here its progress timeout: rank 1 never
// calls) is not taken for an aborted one, so its rank goes on to find out who is to blame.
TEST(MonitorTest, OnlyACallStoppedByTheAbortIsTakenForAborted) {
  auto transports = LoopbackHub::CreateWorld(2);
  Communicator c(std::move(transports[0]));
  std::vector<std::pair<uint64_t, bool>> seen;  // (seq, stopped by abort) per failure
  c.SetFailureHandler([&](const OpResult& failed) {
    seen.push_back({failed.seq, c.monitor()->StoppedByAbort(failed.seq, failed.status)});
    return failed.status;
  });
  CallOptions opts;
  opts.timeout = Millis(100);
  std::vector<int32_t> v(8, 1);
  const uint64_t first = c.monitor()->Snapshot().last_started_seq + 1;
  const Status verdict = AbortedError("verdict: rank 1 dead");
  ASSERT_TRUE(c.monitor()->Abort(first, verdict));
  Status s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
  s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0], std::make_pair(first, true));
  EXPECT_EQ(seen[1], std::make_pair(first + 1, false));
  // The same sequence number with another error is not the abort either.
  EXPECT_FALSE(c.monitor()->StoppedByAbort(first, DeadlineExceededError("no progress")));
}

// A call that failed for want of this rank's own memory is kept as such, for the other ranks'
// verdicts to name this rank; a verdict another rank told with that code is not this rank's.
TEST(MonitorTest, OnlyThisRanksOwnExhaustionIsKept) {
  auto transports = LoopbackHub::CreateWorld(2);
  Communicator c(std::move(transports[0]));
  c.SetFailureHandler([](const OpResult& failed) { return failed.status; });
  CallOptions opts;
  opts.timeout = Millis(100);
  std::vector<int32_t> v(8, 1);
  const uint64_t first = c.monitor()->Snapshot().last_started_seq + 1;
  ASSERT_TRUE(c.monitor()->Abort(first, ResourceExhaustedError("verdict: rank 1 out of memory")));
  Status s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s;
  EXPECT_EQ(c.monitor()->Snapshot().failed_seq, first);
  EXPECT_EQ(c.monitor()->Snapshot().exhausted_seq, 0u);
  c.monitor()->End(first + 1, ResourceExhaustedError("cannot allocate 1 GiB"));
  EXPECT_EQ(c.monitor()->Snapshot().exhausted_seq, first + 1);
  c.monitor()->End(first + 2, DeadlineExceededError("no progress"));
  EXPECT_EQ(c.monitor()->Snapshot().exhausted_seq, first + 1);
}

// A verdict that arrives for the operation that just failed here (its failure handler is
// still deciding what to say) is kept for that handler, though it stopped nothing (a stall
// probe must not take it for a mismatch it stopped); one for an earlier operation is not.
TEST(MonitorTest, AVerdictForTheOperationThatJustFailedIsKeptForItsHandler) {
  auto transports = LoopbackHub::CreateWorld(2);
  Communicator c(std::move(transports[0]));
  const Status verdict = AbortedError("rank 1 stalled [verdict from rank 1, received on rank 0]");
  std::vector<uint64_t> failed_seqs;
  std::vector<std::optional<Status>> kept;
  std::vector<bool> before, earlier_taken;
  c.SetFailureHandler([&](const OpResult& failed) {
    failed_seqs.push_back(failed.seq);
    before.push_back(c.monitor()->VerdictReceived(failed.seq).has_value());
    earlier_taken.push_back(c.monitor()->Abort(failed.seq - 1, verdict));
    EXPECT_FALSE(c.monitor()->Abort(failed.seq, verdict));  // kept, but it stopped nothing
    kept.push_back(c.monitor()->VerdictReceived(failed.seq));
    return failed.status;
  });
  CallOptions opts;
  opts.timeout = Millis(100);  // rank 1 never calls: each call fails on its own
  std::vector<int32_t> v(8, 1);
  for (int call = 0; call < 2; ++call) {
    Status s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts);
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  }
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(failed_seqs[1], failed_seqs[0] + 1);
  for (int call = 0; call < 2; ++call) {
    EXPECT_FALSE(before[call]) << "call " << call;
    EXPECT_FALSE(earlier_taken[call]) << "call " << call;
    ASSERT_TRUE(kept[call].has_value()) << "call " << call;
    EXPECT_EQ(kept[call]->message(), verdict.message());
  }
}

// A verdict about a call this rank already completed is dropped, unless it says the ranks'
// calls differed there (AbortKind::kMismatch, whatever its code): then this rank's result of
// that call may be wrong, and its next call (one, not every later one) reports it.
TEST(MonitorTest, OnlyAMismatchFoundAfterACallCompletedFailsTheNextCall) {
  auto transports = LoopbackHub::CreateWorld(1);
  Communicator c(std::move(transports[0]));
  std::vector<int32_t> v(8, 1);
  ASSERT_TRUE(c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum).ok());
  const uint64_t done = c.monitor()->Snapshot().last_started_seq;
  // Not a mismatch: an InvalidArgument code alone does not make one.
  EXPECT_FALSE(c.monitor()->Abort(done, InvalidArgumentError("rank 1 refused its call")));
  EXPECT_FALSE(c.monitor()->Abort(done, AbortedError("rank 1 died")));
  EXPECT_TRUE(c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum).ok());
  EXPECT_FALSE(c.monitor()->Abort(done, AbortedError("a different root on rank 1"),
                                  OpMonitor::AbortKind::kMismatch));
  Status s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("the ranks' calls diverged at seq=" + std::to_string(done)),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("a different root on rank 1"), std::string::npos) << s;
  // Reported, it counts as failed here (later verdicts look past it), and the same divergence
  // told again (another rank found it too) fails no further call.
  const auto failed = c.monitor()->Snapshot().failed_recent;
  EXPECT_NE(std::find(failed.begin(), failed.end(), done), failed.end());
  EXPECT_FALSE(c.monitor()->Abort(done, AbortedError("a different root on rank 2"),
                                  OpMonitor::AbortKind::kMismatch));
  EXPECT_TRUE(c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum).ok());
}

// One stuck rank can hold some ranks in call S while the rest moved on to S+1 and failed
// there: the verdict about S+1, kept for when this rank starts it, also answers for S.
TEST(MonitorTest, AVerdictAboutTheNextCallAnswersForTheOneThatFailed) {
  auto transports = LoopbackHub::CreateWorld(2);
  Communicator c(std::move(transports[0]));
  const Status verdict = AbortedError("rank 1 stalled [verdict from rank 1, received on rank 0]");
  std::optional<Status> before, after;
  bool later_kept = false;
  c.SetFailureHandler([&](const OpResult& failed) {
    before = c.monitor()->VerdictReceived(failed.seq);
    later_kept = c.monitor()->Abort(failed.seq + 1, verdict);
    after = c.monitor()->VerdictReceived(failed.seq);
    return failed.status;
  });
  CallOptions opts;
  opts.timeout = Millis(100);  // rank 1 never calls
  std::vector<int32_t> v(8, 1);
  Status s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts);
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(before.has_value());
  EXPECT_TRUE(later_kept);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->message(), verdict.message());
  // And the kept abort still stops that next call when it starts.
  s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts);
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s;
}

// The freeze watchdog: ticks far apart are a stretch the process did not run; one still going
// on (no tick since) counts too; stretches that ended before `since`, or under a second, do
// not; and without a watchdog nothing is claimed.
TEST(MonitorTest, TicksFarApartAreAStretchTheProcessDidNotRun) {
  OpMonitor m(SteadyClock::Get());
  const TimePoint t0 = SteadyClock::Get()->Now();
  EXPECT_EQ(m.FrozenSince(t0, t0 + Seconds(60)), Duration::zero());  // no watchdog
  m.Tick(t0);
  m.Tick(t0 + Millis(20));
  m.Tick(t0 + Millis(900));  // 880 ms late: under the second that counts
  EXPECT_EQ(m.FrozenSince(t0, t0 + Millis(910)), Duration::zero());
  m.Tick(t0 + Seconds(5));  // 4.1 s without a tick: stopped
  m.Tick(t0 + Seconds(5) + Millis(20));
  EXPECT_EQ(m.FrozenSince(t0, t0 + Seconds(6)), Seconds(5) - Millis(900));
  EXPECT_EQ(m.FrozenSince(t0 + Seconds(6), t0 + Seconds(6)), Duration::zero());  // ended before
  // Stopped right now: the watchdog has not ticked for 3 s.
  EXPECT_EQ(m.FrozenSince(t0 + Seconds(6), t0 + Seconds(8) + Millis(20)), Seconds(3));
}

// A progress deadline counts only the time the process ran: a stretch it did not run between
// the last progress and now pushes the deadline back by the part of it inside that wait, one
// still going on (resumed before the watchdog ticked) as well; without a watchdog, or before
// the deadline, it is last progress + timeout.
TEST(MonitorTest, AProgressDeadlineDoesNotCountTheTimeTheProcessDidNotRun) {
  OpMonitor m(SteadyClock::Get());
  const TimePoint t0 = SteadyClock::Get()->Now();
  const Duration T = Seconds(2);
  EXPECT_EQ(m.ProgressDue(t0, T, t0 + Seconds(30)), t0 + T);  // no watchdog
  m.Tick(t0);
  // Resumed at t0 + 10 s, before the watchdog's next tick: 10 s not run.
  EXPECT_EQ(m.ProgressDue(t0 + Millis(500), T, t0 + Seconds(10)), t0 + Seconds(10) + T);
  EXPECT_EQ(m.ProgressDue(t0, T, t0 + Millis(100)), t0 + T);  // not due yet: as it was
  for (TimePoint t = t0 + Seconds(10); t <= t0 + Seconds(13); t += Millis(500)) m.Tick(t);
  // The same stretch, now kept by the watchdog; only its part after the last progress counts.
  EXPECT_EQ(m.ProgressDue(t0 + Seconds(4), T, t0 + Seconds(12)), t0 + Seconds(12));
  EXPECT_EQ(m.ProgressDue(t0 + Seconds(11), T, t0 + Seconds(13)), t0 + Seconds(13));  // after it
  // A wait that is due even so fails: 2.5 s of running time since the last progress.
  EXPECT_LT(m.ProgressDue(t0 - Seconds(1), T, t0 + Seconds(11) + Millis(500)),
            t0 + Seconds(11) + Millis(500));
}

// Progress another rank on the chain of waits made in the running call (as the stall probe
// reports it) holds this rank's progress deadline off: the call fails T after the last such
// report, not T after its own last byte, and its error says where the call last moved. A
// report about another call, or one made when no call runs, holds nothing off.
TEST(MonitorTest, ProgressElsewhereInTheCallHoldsTheDeadlineOff) {
  auto transports = LoopbackHub::CreateWorld(2);
  Communicator c(std::move(transports[0]));  // rank 1 never calls
  OpMonitor& m = *c.monitor();
  const Clock& clock = *SteadyClock::Get();
  m.NoteMovingElsewhere(m.Snapshot().last_started_seq + 1, clock.Now() + Seconds(60), 1);
  CallOptions opts;
  opts.timeout = Millis(600);
  std::vector<int32_t> v(8, 1);
  Status s;
  const TimePoint t0 = clock.Now();
  std::thread call(
      [&] { s = c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum, opts); });
  uint64_t seq = 0;
  while (seq == 0) {
    const OpSnapshot snap = m.Snapshot();
    if (snap.in_op) seq = snap.seq;
    std::this_thread::sleep_for(Millis(1));
  }
  TimePoint last_note{};
  while (clock.Now() - t0 < Millis(1500)) {
    last_note = clock.Now();
    m.NoteMovingElsewhere(seq, last_note, 1);
    m.NoteMovingElsewhere(seq + 1, last_note + Seconds(60), 1);  // another call's: ignored
    std::this_thread::sleep_for(Millis(150));
  }
  EXPECT_TRUE(m.Snapshot().in_op) << "the call failed while it moved elsewhere: " << s;
  call.join();
  const TimePoint ended = clock.Now();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s;
  EXPECT_GE(ended - last_note, Millis(550)) << s;
  EXPECT_LT(ended - last_note, Millis(1500)) << s;
  EXPECT_NE(s.message().find("rank 1, on which this rank's wait depends, last moved"),
            std::string::npos)
      << s;
  // Without the monitor's word the deadline is the call's own.
  EXPECT_EQ(m.ProgressDue(t0, Millis(600), t0 + Seconds(1)), t0 + Millis(600));
  EXPECT_EQ(m.ProgressDue(t0, Millis(600), t0 + Seconds(1), seq + 1), t0 + Millis(600));
}

// A stretch that ended before the last successful call began is not counted from it: the
// others took part in that whole call after the stretch.
TEST(MonitorTest, AStretchBeforeTheLastSuccessIsNotCountedFromIt) {
  auto transports = LoopbackHub::CreateWorld(1);
  Communicator c(std::move(transports[0]));
  OpMonitor& m = *c.monitor();
  const TimePoint t0 = SteadyClock::Get()->Now();
  m.Tick(t0 - Seconds(10));
  m.Tick(t0 - Seconds(5));  // 5 s without a tick, over before t0
  m.Tick(t0);
  EXPECT_EQ(m.FrozenSince(TimePoint{}, t0), Seconds(5));
  EXPECT_EQ(m.last_success_start(), TimePoint{});
  std::vector<int32_t> v(8, 1);
  ASSERT_TRUE(c.Allreduce(v.data(), v.data(), 8, DataType::kInt32, ReduceOp::kSum).ok());
  const TimePoint began = m.last_success_start();
  EXPECT_GE(began, t0);
  EXPECT_EQ(m.FrozenSince(began, began + Millis(10)), Duration::zero());
}

TEST(CommunicatorTest, CountersOfEachCallAreItsOwn) {
  // last() reuses its counters' storage from call to call: each call's counts must still be
  // that call's alone (ring allreduce: 2(p-1) messages each way per rank).
  auto transports = LoopbackHub::CreateWorld(4);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (auto& t : transports) comms.push_back(std::make_unique<Communicator>(std::move(t)));
  std::vector<std::thread> threads;
  std::vector<std::vector<int64_t>> sent(4);
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      CallOptions o;
      o.algorithm = algo::Algorithm::kRing;
      std::vector<float> in(400, 1.0f), out(400);
      for (int k = 0; k < 3; ++k) {
        ASSERT_TRUE(
            comms[r]
                ->Allreduce(in.data(), out.data(), 400, DataType::kFloat32, ReduceOp::kSum, o)
                .ok());
        sent[r].push_back(comms[r]->last().counters.msgs_sent());
        sent[r].push_back(comms[r]->last().counters.bytes_sent());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) {
    // 2(p-1) = 6 messages of n/p = 100 floats each, every call.
    EXPECT_EQ(sent[r], (std::vector<int64_t>{6, 2400, 6, 2400, 6, 2400})) << "rank " << r;
  }
}

// Each rank verifies the whole world's schedule when it first builds one, which grows
// faster than p (27 s and 3.2 GB per rank for a 512-rank ring allreduce): worlds beyond
// verify_max_ranks (64 by default) build only their own steps. The results are right either
// way.
TEST(CommunicatorTest, SchedulesAreVerifiedUpToTheWorldSizeLimit) {
  constexpr int p = 4;
  for (int limit : {p, p - 1}) {
    SCOPED_TRACE("verify_max_ranks = " + std::to_string(limit));
    auto transports = LoopbackHub::CreateWorld(p);
    CommOptions options;
    options.verify_max_ranks = limit;
    std::vector<std::unique_ptr<Communicator>> comms;
    for (auto& t : transports) {
      comms.push_back(std::make_unique<Communicator>(std::move(t), options));
    }
    std::vector<Status> status(p);
    std::vector<std::vector<int32_t>> out(p, std::vector<int32_t>(3 * p));
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
      threads.emplace_back([&, r] {
        CallOptions o;
        o.algorithm = algo::Algorithm::kRing;
        std::vector<int32_t> in(3 * p);
        for (int i = 0; i < 3 * p; ++i) in[i] = r * 1000 + i;
        status[r] = comms[r]->Allreduce(in.data(), out[r].data(), 3 * p, DataType::kInt32,
                                        ReduceOp::kSum, o);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < p; ++r) {
      ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
      for (int i = 0; i < 3 * p; ++i) {
        ASSERT_EQ(out[r][i], 1000 * p * (p - 1) / 2 + p * i) << "rank " << r << " element " << i;
      }
      EXPECT_EQ(comms[r]->schedules_verified(), p <= limit ? 1 : 0) << "rank " << r;
    }
  }
  EXPECT_EQ(CommOptions().verify_max_ranks, 64);
}

}  // namespace
}  // namespace gyre
