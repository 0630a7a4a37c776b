// Rendezvous over a Store: every rank of a job publishes a PeerRecord (its address, host
// and pid) and receives everyone's, or an error naming the ranks that are missing, claimed
// twice, or disagree on the world size. All keys live under the job id, so state left by an
// earlier job in the same folder or server cannot confuse a new one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/store/store.h"

namespace gyre::store {

struct PeerRecord {
  int rank = -1;
  int world_size = 0;
  std::string address;  // where this rank accepts peer connections, e.g. "10.0.0.7:41231"
  // Every address it can be reached at, best first (address is the first); a rank listening
  // on several interfaces publishes one per interface. Empty means {address}.
  std::vector<std::string> addresses;
  std::string host;  // host name, for messages
  int64_t pid = 0;
  // Tells two claimants of one rank apart even when host and pid match (for example after
  // a restart in a container); Rendezvous fills in a random one when empty.
  std::string nonce;
  // Which process wrote the record: boot id, pid namespace, pid and start time (Rendezvous
  // fills it in when empty). A rank on the same machine and in the same pid namespace can
  // tell from it that the writer has exited, though its pid may have been reused.
  std::string process;
  // What decides the rank's automatic algorithm choice (Communicator::ChoiceBasis), for the
  // ranks to compare once they have met: digests for a job on one host and across hosts (0:
  // not given), and where the choice comes from ("calibration file /x/cal.txt").
  uint64_t choice_one_host = 0;
  uint64_t choice_across_hosts = 0;
  std::string choice_source;
  // The call defaults that shape every call's schedule (job::CallDefaults), compared the same
  // way; empty: not given.
  std::string call_defaults;
};

// The most ranks a job may have: the rendezvous refuses larger worlds, a TCP store server
// serves at most this many (TcpStoreServer::kMaxRanks), and job::ResolveIdentity refuses them
// before a rank opens anything.
inline constexpr int kMaxWorldSize = 1 << 20;

// "rank 2 (host node7, pid 4242)"
std::string DescribePeer(const PeerRecord& peer);

// "rank 3", "ranks 1, 4-7, 9"
std::string FormatRankList(const std::vector<int>& ranks);

// Claims me.rank for job `job_id`, publishes `me`, and waits until all me.world_size ranks
// have done so. Returns the records indexed by rank (the caller's own with its nonce set).
// Errors:
//  - AlreadyExists: another process holds me.rank (names both claimants' host and pid);
//  - InvalidArgument: bad arguments, or ranks disagree on the world size (names both values
//    and ranks);
//  - DeadlineExceeded: "rendezvous of job J: 3 of 4 ranks arrived after 5.00 s (deadline
//    5.00 s); missing: rank 2";
//  - the store's own error (e.g. Unavailable) with the job as context.
// The last 5% of the time left (at most 50 ms) is kept for finding out which ranks are
// missing, so the error comes by the deadline. A rank that gives up waiting then gives its
// slot back (LeaveRendezvous), so a retry under the same job id finds it free; a slot held by
// a process on this machine that has exited fails the claim naming it (AlreadyExists).
// `claimed`, if set, runs once this rank holds its slot (and agrees on the world size),
// before it waits for the others: what a rank publishes under its rank beside the record
// belongs there, so that a second claimant, which fails, never overwrites the owner's keys.
// Its error is the rendezvous' error. When it is given, the records already in their slots
// are checked before it runs: one whose writer on this machine has exited fails the
// rendezvous (Unavailable, naming the rank and the stale store). The caller's ranks must wait
// for each other's `claimed` keys before they can exit (as JoinJob's wait for the control
// addresses), else a rank that finished fast could be taken for such a writer; without
// `claimed` there is no check.
// `stop_requested`, if set, is asked before the claim and then every few hundred ms while
// this rank waits for the others (the wait is cut into slices to ask it): once it says yes,
// the rank gives its slot back (LeaveRendezvous) and the call fails with Aborted, saying
// whether the slot could be given back. A process stopped there (a SIGTERM) otherwise kept
// its slot, and the next run under the same job id was refused as an unfinished earlier run.
// `launch_id`, if set, is the launcher's id of this run (gyrerun's GYRE_LAUNCH_ID): while
// this rank waits, a rank that run's launcher marked as exited (MarkExit) before it claimed
// its slot fails the rendezvous at once, naming it.
StatusOr<std::vector<PeerRecord>> Rendezvous(Store* store, const std::string& job_id,
                                             const PeerRecord& me, Deadline deadline,
                                             const std::function<Status()>& claimed = {},
                                             const std::function<bool()>& stop_requested = {},
                                             const std::string& launch_id = "");

// A launcher's word that rank `rank`'s process exited on its own (`what`: "its process
// (pid 4711) exited with status 0 (seen by gyrerun)"), for the run `launch_id` names. A
// Rendezvous given the same `launch_id` that is waiting for that rank, whose slot is still
// empty, fails at once (Unavailable, naming the rank and `what`) and gives its own slot back:
// that rank will never claim it. Written for every exit, since the launcher cannot tell
// whether the rank joined; marks of other launch ids (an earlier run under the same job id)
// are ignored, as are marks of ranks that hold their slot.
Status MarkExit(Store* store, const std::string& job_id, const std::string& launch_id, int rank,
                const std::string& what, Deadline deadline);

// Removes the marks MarkExit wrote for `ranks` in job `job_id`, and the counts beside them,
// once the run they belong to is over: a run that ended cleanly leaves nothing in the store.
Status ClearExitMarks(Store* store, const std::string& job_id, const std::vector<int>& ranks,
                      Deadline deadline);

// The store key of rank `rank`'s slot in the rendezvous of job `job_id`: its record is there
// from the rank's claim until it leaves (LeaveRendezvous).
std::string RendezvousSlotKey(const std::string& job_id, int rank);

// Removes what Rendezvous wrote for `me` (the record Rendezvous returned for it): its slot,
// and the world size record if `me` wrote that, so that the job id can be used again in the
// same store. A slot or record holding another claimant's record is left alone. Call it only
// once every rank has finished its rendezvous, for example after a collective that needed
// every rank's data: a rank still waiting there would wait for the removed slot.
Status LeaveRendezvous(Store* store, const std::string& job_id, const PeerRecord& me,
                       Deadline deadline);

// What the store shows of a job's rendezvous, for inspection (gyrectl): the world size the
// first rank to arrive fixed (0 when no such record is there: no rank came, or the one that
// wrote it has left) and the ranks whose slot holds a record, ascending. Reads only.
struct RendezvousState {
  int world_size = 0;
  std::vector<int> joined;
};
StatusOr<RendezvousState> ReadRendezvous(Store* store, const std::string& job_id,
                                         Deadline deadline);

// Returns once all `world_size` ranks of `job_id` have entered the barrier called `name`;
// DeadlineExceeded names the ranks that did not. Each barrier instance needs its own name
// (a name is used once per job).
Status StoreBarrier(Store* store, const std::string& job_id, const std::string& name, int rank,
                    int world_size, Deadline deadline);

}  // namespace gyre::store
