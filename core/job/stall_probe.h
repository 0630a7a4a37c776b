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

 private:
  void Loop();
  // One round of questions about operation `seq`; returns true if it found a divergence
  // and stopped the operation with it.
  bool Probe(const OpSnapshot& snap, Duration elapsed);

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
