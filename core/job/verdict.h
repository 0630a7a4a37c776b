// The verdict: when an operation fails on a rank, it asks every other rank for its state over
// the control path, classifies each one (dead, stalled, not entered, diverged, slow, waiting,
// done), picks the root cause — the faulty rank, not this rank's neighbour — and words one
// error that every survivor reports. Classification is a pure function, tested on its own.
#pragma once

#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/comm/flight_recorder.h"
#include "core/exec/monitor.h"
#include "core/job/control.h"
#include "core/transport/transport.h"

namespace gyre::job {

enum class RankClass {
  kSelf,
  kDead,
  kLeft,         // its program let go of its communicator (destroyed it without Close) and went on
  kUnreachable,  // the network to it is cut, or its host is down
  kStalled,
  kNotEntered,
  kDiverged,
  kRefused,    // it refused this call before running it: it sent nothing in it and never will
  kExhausted,  // this call failed there for want of its own memory, descriptors or threads
  kDropped,    // it dropped a connection for what its sender did (over max_unexpected_bytes, a
               // protocol violation): every call over that pair fails on it from then on
  kSlow,
  kWaiting,
  kDone,
  kUnknown
};
const char* RankClassName(RankClass c);

struct PeerView {
  int rank = 0;
  Reach reach = Reach::kError;
  proto::RankState state;  // valid when reach == kAnswered
  std::string error;       // why it did not answer
  // From the rendezvous, for ranks that cannot answer.
  int64_t pid = 0;
  std::string host;
  std::string data_address;
};

struct LocalFailure {
  int rank = 0;
  std::string host;  // this rank's host, as published at rendezvous
  uint64_t seq = 0;
  OpDesc desc;
  std::string op_name;
  Status status;        // this rank's own error
  Duration elapsed{};   // since the operation started
  Duration timeout{};   // the progress timeout T
  int waiting_on = -1;  // the peer this rank waited for, if any
  // The longest stretch this rank's process did not run that ended after its last successful
  // call began (OpMonitor::FrozenSince, last_success_start), and the longest that ended
  // during this call. The first at least
  // the progress timeout, or the second at least half of it, and nothing else (a divergence)
  // explaining the failure, this rank is the cause: the others gave up on it.
  Duration frozen{};
  Duration frozen_in_call{};
  int64_t bytes_received = 0;
  int64_t bytes_expected = 0;
  std::vector<CallRecord> recent;  // this rank's recent calls (core/exec/monitor.h)
  // Earlier calls that failed on this rank (OpSnapshot::failed_recent): a divergence there
  // was reported here already and is no cause of a later failure.
  std::vector<uint64_t> failed_here;
  // Peers whose daemon said their program went away (OpSnapshot::departures): such a rank
  // is dead unless it completed this call, and the verdict names its program.
  std::vector<PeerDeparture> departures;
};

struct Verdict {
  int root = -1;         // the rank at fault, -1 if none could be named
  int64_t root_pid = 0;  // its process, as it answered or published it (0: this rank)
  RankClass root_class = RankClass::kUnknown;
  // How the root's class reads: RankClassName, except for kExhausted, which names the
  // resource that ran out ("out of file descriptors").
  std::string root_what;
  std::vector<RankClass> classes;  // per rank
  std::string text;                // the whole error message
  // For a divergence: how many ranks' calls at that sequence number were known. Fewer than
  // the ranks that answered means some had not made that call yet and the majority may
  // still change: ask again.
  int voters = 0;
};

// What a ResourceExhausted failure ran out of, read from its message (the error of the system
// call that failed, or gyre's own wording): "file descriptors", "threads", "disk space", or
// "memory" for anything else (memory is what most such failures are).
std::string ExhaustedResource(const std::string& error);

// `peers` has one entry per rank (this rank's own entry is ignored).
Verdict Classify(const LocalFailure& me, const std::vector<PeerView>& peers);

// A verdict's text as read on another rank than `from_rank`, the one that wrote it: a
// verdict that names its own writer says "rank F (this rank)", which on the reader would
// point at the wrong process; there it says "rank F (the rank that sent this verdict)".
std::string VerdictAsRelayed(const std::string& text, int from_rank);

// A verdict that names a rank is also kept in the flight record as a "blame" event whose
// detail is "<rank> <pid> <class>" ("2 31927 stalled"): gyrerun reads it to mark that rank as the
// root cause, where the first process to exit is only a survivor reporting it. Nothing is recorded
// for a null verdict or one that names no rank.
inline constexpr char kBlameEvent[] = "blame";
// `self`: this rank (a verdict naming it names this process).
void RecordBlame(FlightRecorder* recorder, uint64_t seq, const Verdict* v, int self);
struct Blamed {
  int rank = -1;
  int64_t pid = 0;   // the blamed rank's process the verdict saw (0: not known)
  std::string what;  // its class: "stalled", "diverged", ...
};
// Reads a blame event's detail back; false when it is not one.
bool ParseBlame(const std::string& detail, Blamed* out);

// This rank's own process did not run for long enough that the others' deadlines ran out on
// it (`frozen` at least T, or `frozen_in_call` at least T/2): Classify names it itself.
bool NotRunningLongEnoughToBlameOthers(const LocalFailure& me);

}  // namespace gyre::job
