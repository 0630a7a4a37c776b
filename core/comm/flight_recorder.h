// The flight recorder: a fixed-size ring of a rank's recent events (operations started and
// finished, joins, connection trouble, verdicts), kept cheaply all the time and dumped as
// JSON when something goes wrong, on SIGUSR1, or on request.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/transport/transport.h"

namespace gyre {

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 2000) : capacity_(capacity) {}

  // `kind`: "op_start", "op_end", "join", "verdict", ...: a string literal (it is kept by
  // pointer, so recording an event copies only `detail`); `seq` 0 when not an operation.
  void Record(const char* kind, uint64_t seq, const std::string& detail);
  // An event whose detail is the operation's name, OpName(desc, seq) (core/exec/executor.h),
  // built only when the ring is dumped: recording it copies no string.
  void RecordOp(const char* kind, uint64_t seq, const OpDesc& desc);

  // {"rank": R, "events": [{"t_us": ..., "kind": ..., "seq": ..., "detail": ...}, ...]}
  // oldest first; t_us is microseconds on the steady clock.
  std::string DumpJson(int rank) const;

  size_t size() const;

 private:
  struct Event {
    int64_t t_us = 0;
    const char* kind = "";
    uint64_t seq = 0;
    std::string detail;  // unless named_by_desc
    bool named_by_desc = false;
    OpDesc desc;
  };
  // The slot the next event goes to; slots are reused in place, keeping their strings'
  // storage. Called with mu_ held.
  Event& Next(const char* kind, uint64_t seq);
  size_t capacity_;
  mutable std::mutex mu_;
  std::vector<Event> ring_;
  size_t next_ = 0;
};

// JSON string escaping for the dumps.
std::string JsonEscape(const std::string& s);

}  // namespace gyre
