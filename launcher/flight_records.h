// Reading the ranks' flight records (core/comm/flight_recorder.h) that a failed job leaves in
// its run folder: what each rank reached, and which rank the ranks' own verdicts blame.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/supervisor.h"

namespace gyre::launcher {

struct FlightEvent {
  std::string kind;
  uint64_t seq = 0;
  std::string detail;  // as escaped in the record
};

// The events of a record (FlightRecorder::DumpJson), oldest first. A scan, not a regex: a
// record's details (verdicts of large jobs) may run to many kilobytes, over which
// std::regex recurses per character.
std::vector<FlightEvent> ParseFlightRecord(const std::string& json);

// Rank r's record in `run_dir` (flight-rank<r>.json), nullopt if it wrote none.
std::optional<std::vector<FlightEvent>> ReadFlightRecord(const std::string& run_dir, int r);

// The rank the ranks' verdicts blame, from each record's blame event
// (core/job/verdict.h): among the verdicts on the earliest failed operation, the rank most
// records name (a tie goes to the lower rank), with the class most of them gave it and the pid
// recorded with that class. A later operation's failure is the first one's consequence (a rank
// that finished the failed call early meets the ranks that left over it in its next call). A
// record's blame counts only if the rank started no later operation: a failure the program
// went on from is not the one that ended the job.
// records[r] is rank r's record (empty when it wrote none). When two ranks blame each other
// (each in its last failure, which across a cut may be one call apart), no vote is taken: the
// ranks are split into the two sides that blame each other (Blame::side_a, side_b), as when
// the network between two groups is cut. `hosts` (hosts[r]: rank r's host, if known) puts
// together pairs that blame each other but share no rank: a cut keeps a host's ranks on
// one side.
Blame BlameOf(const std::vector<std::vector<FlightEvent>>& records, int world_size,
              const std::vector<std::string>& hosts = {});

// The process of the rank `blame` names that ended the job by exiting with an error of its
// own, or null: when the verdict says the rank left (its program let go of its communicator
// without Comm::Close) or is dead, and one of that rank's processes failed by itself (not
// stopped by gyrerun): the job's root cause if it is one of them (its gyred, killed by a
// signal, say), else its program if that exited non-zero. The verdict then tells what its
// going did to the others, not why it went: its exit status or signal and its last stderr
// line do.
const ProcessResult* ExitedOnItsOwn(const Blame& blame, const std::vector<ProcessResult>& results);

// What gyrerun prints after "gyrerun: verdict: " for `verdict` (one rank's verdict text,
// without its own view): the verdict, or, when ExitedOnItsOwn names a process, that process's
// exit and last stderr line first, and the others' failed call as its consequence:
//   rank 0 (pid 41) exited with code 1: "gyre-bench rank 0: InvalidArgument: cannot open
//   --jsonl /x"; the other ranks' barrier seq=1 (dissemination) failed because it had gone
//   (it left without Comm::Close)
// or, for a process killed by a signal, "rank 2 gyred (pid 40) was killed by signal SIGKILL
// (9); the other ranks' ...".
std::string VerdictLine(const Blame& blame, const std::string& verdict,
                        const std::vector<ProcessResult>& results);

}  // namespace gyre::launcher
