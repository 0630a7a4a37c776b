// The stall probe: when an operation has made no progress for a short while (a small part of
// the progress timeout), this rank asks the others what they called. A mismatch whose frames
// never meet — a rooted collective called with different roots, where nobody sends to a rank
// that expects data — is then caught within a fraction of the timeout, on every rank, rather
// than at it. While operations progress it only reads the monitor now and then.
#pragma once

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
  StallProbe(Communicator* comm, std::shared_ptr<const JobDirectory> dir,
             Duration progress_timeout);
  ~StallProbe();

  void Start();
  void Stop();

  // How long an operation must be quiet before the first probe, under timeout `t`.
  static Duration FirstProbeAfter(Duration t);

 private:
  void Loop();
  // One round of questions about operation `seq`; returns true if it found a divergence
  // and stopped the operation with it.
  bool Probe(const OpSnapshot& snap, Duration elapsed);

  Communicator* comm_;
  std::shared_ptr<const JobDirectory> dir_;
  Duration timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gyre::job
