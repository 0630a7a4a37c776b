// The stall probe: when an operation has made no progress for a short while (a small part of
// the progress timeout), this rank asks the others what they called. A mismatch whose frames
// never meet — a rooted collective called with different roots, where nobody sends to a rank
// that expects data — is then caught within a fraction of the timeout, on every rank, rather
// than at it. While operations progress it only reads the monitor now and then.
//
// Its loop also ticks the freeze watchdog (OpMonitor::Tick) every 20 ms, so it never waits on
// anything itself: a round of questions (up to a second per unanswering rank) runs on a
// thread of its own, or a slow round would read as this process not running.
//
// A round asks every rank, so with all ranks quiet at once (the first call of a large job,
// while its connections open) the job would make p^2 queries. So a rank's rounds come later
// the higher its rank (up to twice the delay), and a rank that is asked by another's round
// about the operation it is quiet in counts that round as its own: one rank asks, the others
// hear it. Beyond kMaxProbedWorld ranks there are no rounds, and such a mismatch is caught
// by the progress timeout instead.
//
// The same thread also follows the chain of waits (in any world size). The progress deadline
// is a rank's own: a rank waits on a peer that is itself waiting on a large message crossing
// a slow link, and would hear nothing for longer than T while the job moves. So while an
// operation stays quiet here (every quarter of T), the probe asks the rank this one waits on,
// then the rank that one waits on, and so on (no rank twice, at most kMaxChainHops), for its
// state; the latest progress a rank on the chain made in this operation or an earlier one
// counts as this rank's (OpMonitor::NoteMovingElsewhere). The walk stops at a rank that does
// not answer (stopped, dead, cut off), is not in an operation, or has moved past this one:
// such a rank lends no time, so a silent peer is still caught T after the last byte anyone
// on the chain moved.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "core/base/clock.h"
#include "core/comm/communicator.h"
#include "core/job/bootstrap.h"

namespace gyre::job {

class StallProbe {
 public:
  // `control` (this rank's endpoint, may be null) tells which rounds other ranks ran.
  StallProbe(Communicator* comm, std::shared_ptr<const JobDirectory> dir, Duration progress_timeout,
             const ControlServer* control = nullptr);
  ~StallProbe();

  // ResourceExhausted, naming the rank, when its thread cannot be started.
  Status Start();
  void Stop();

  // How long an operation must be quiet before the first probe, under timeout `t`.
  static Duration FirstProbeAfter(Duration t);
  // The delay `d` as rank `rank` of `size` waits it: from d (rank 0) to nearly 2d.
  static Duration Stretched(Duration d, int rank, int size);
  static constexpr int kMaxProbedWorld = 64;
  static constexpr int kMaxChainHops = 16;
  // How often the chain of waits is followed while an operation is quiet, under timeout `t`:
  // three chances before the deadline, so one slow query (a control connection queued behind
  // the data on the slow link) does not let it pass.
  static Duration ChainEvery(Duration t);

 private:
  void Loop();
  // One round of questions about operation `seq`; returns true if it found a divergence
  // and stopped the operation with it.
  bool Probe(const OpSnapshot& snap, Duration elapsed);
  // Follows the chain of waits from the rank `snap` waits on (see the top of this file).
  void FollowChain(const OpSnapshot& snap);

  Communicator* comm_;
  std::shared_ptr<const JobDirectory> dir_;
  Duration timeout_;
  const ControlServer* control_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
  // The round of questions in flight, if any; started and joined by the loop's thread.
  std::thread round_;
  std::atomic<bool> in_round_{false};
  std::atomic<uint64_t> acted_on_{0};  // the last operation a round stopped, plus one
};

}  // namespace gyre::job
