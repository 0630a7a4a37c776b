// An optional capability of a Transport: moving bytes on the thread that waits for them.
// A transport with its own io thread hands every message to that thread and every completion
// back, two thread switches per message; on a few cores that dominates small collectives.
// A transport that also implements DrivenTransport lets one waiting thread at a time (the
// driver) do the socket work itself while it holds the lease, so a message costs no switch.
// The executor finds it with dynamic_cast; transports without it are driven as before.
#pragma once

#include <cstddef>

#include "core/base/clock.h"

namespace gyre {

class DrivenTransport {
 public:
  virtual ~DrivenTransport() = default;

  // Takes the driver lease for the calling thread, for an operation whose largest message
  // is `max_message_bytes`. False if another thread holds it (that thread then moves this
  // caller's bytes too), or if the transport's own thread moves messages that large better;
  // the caller then waits as it would without the capability. Every AcquireDriver that
  // returned true needs one ReleaseDriver.
  virtual bool AcquireDriver(size_t max_message_bytes) = 0;
  virtual void ReleaseDriver() = 0;

  // Lease holder only. Moves bytes on this thread until at least one `done` callback ran in
  // this call, Wake() was called, or `until` passed, whichever comes first. Callbacks of
  // any operation may run inside it.
  virtual void Drive(TimePoint until) = 0;

  // Any thread: makes a Drive in progress (or the next one) return soon.
  virtual void Wake() = 0;
};

}  // namespace gyre
