// Joining a job: open the store, bind this rank's TCP listener, rendezvous (publish the
// address, learn everyone's, or fail naming the missing or conflicting ranks), connect the
// transport and hand back a Communicator. Used by gyred and by the embedded client alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/auth/secret.h"
#include "core/comm/communicator.h"
#include "core/job/control.h"
#include "core/job/identity.h"
#include "core/store/rendezvous.h"
#include "core/store/store.h"

namespace gyre::job {

struct JoinOptions {
  Identity identity;
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;
  Duration rendezvous_timeout = Seconds(60);
  CommOptions comm;
  // Ask the other ranks and name the root cause when an operation fails (the verdict).
  bool verdicts = true;
  // Write this rank's flight recorder here (flight-rank<R>.json) when an operation fails.
  std::string flight_dir;
  // The job's secret, proved on every store and peer connection. When empty, the file
  // identity.secret_file names is loaded; when that is empty too, the job runs without one.
  auth::Secret secret;
  // When set, the store to rendezvous through (for example one a framework hands over, such
  // as torch's c10d store) instead of opening identity.store_url.
  std::function<StatusOr<std::unique_ptr<store::Store>>()> store_factory;
  // Asked before this rank claims its rendezvous slot and every few hundred ms while it waits
  // there for the others (store::Rendezvous): once it says yes, the rank gives its slot and
  // its control address back, and JoinJob fails with Aborted. Not asked once the rendezvous is
  // complete: the rank then goes on joining, and its caller decides what a stop means.
  std::function<bool()> stop_requested;
  // Runs once, just before the rendezvous (the store open, nothing of this rank in it yet).
  // gyred installs its SIGTERM handler here: until then the signal's default action ends the
  // process, which has nothing to give back, and from then on stop_requested sees it.
  std::function<void()> before_rendezvous;
};

// Under gyrerun: the file a rank creates in its flight folder once it holds its rendezvous
// slot (JoinOptions::flight_dir, Identity::launch_id), so that gyrerun, seeing the rank's
// program exit 0, marks the exit in the store (store::MarkExit) only for a rank that never
// got that far; a store write and its fsync per rank at the end of every job bought nothing.
std::string JoinedNotePath(const std::string& flight_dir, const std::string& launch_id, int rank);

// Writes comm's flight recorder to <dir>/flight-rank<R>.json; returns the path.
StatusOr<std::string> WriteFlightRecord(Communicator* comm, const std::string& dir);

// Every rank's addresses, as found at rendezvous.
struct JobDirectory {
  std::string job_id;
  auth::Credentials credentials;               // this rank's proof on the control path
  std::vector<store::PeerRecord> peers;        // index = rank
  std::vector<std::string> control_addresses;  // index = rank
};

struct Joined {
  std::unique_ptr<store::Store> store;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<ControlServer> control;
  std::shared_ptr<JobDirectory> directory;
  std::vector<store::PeerRecord> peers;
  std::string address;  // this rank's listening address
  // Looks for mismatched calls while an operation is quiet (core/job/stall_probe.h); last,
  // so it stops first.
  std::shared_ptr<class StallProbe> probe;
};

// The store key under which rank `rank` of `job_id` publishes its control address.
std::string ControlKey(const std::string& job_id, int rank);

// Removes this rank's records from the job's store (its rendezvous slot, its control address,
// its reachability check), so that a later run may use the job id again in the same store.
// Only after a call that needed every rank's data (Close's exchange, an allreduce): every rank
// has then finished joining, and none reads these keys any more.
Status LeaveJob(const Joined& joined, Deadline deadline);
// LeaveJob within 2 s. A store that cannot be reached by then (its host has exited) costs a
// WARNING naming it (after `log_prefix`), not the caller's success.
void LeaveJobOrWarn(const Joined& joined, const std::string& log_prefix);

// The failure handler JoinJob installs: on a local failure, query every rank's control
// endpoint (bounded by `query_timeout`), classify, tell the others, and return the verdict.
// Beyond kAllAskAtOnce ranks, after a progress timeout, rank r first waits min(r, 16)/4 query
// timeouts for another rank's verdict, so that a failure every rank sees at once is not p^2
// queries.
inline constexpr int kAllAskAtOnce = 16;
// How long rank `rank` of `size` waits for its turn before it asks (zero up to kAllAskAtOnce
// ranks). The longest over the job, plus its inquiry and its telling the others (a query
// timeout each), is how long a launcher keeps collecting exits to hear every survivor.
Duration VerdictTurnWait(int rank, int size, Duration progress_timeout);
Communicator::FailureHandler MakeVerdictHandler(Communicator* comm,
                                                std::shared_ptr<const JobDirectory> directory,
                                                Duration progress_timeout,
                                                std::string flight_dir = "");

// The file descriptors a rank of a `world_size` job may hold at once: two connections to
// each peer, one control connection to each while it explains a failure, and a margin for the
// store, listeners and the program's own files. JoinJob raises the soft limit to it, or fails
// before connecting (ResourceExhausted) when the hard limit is lower.
uint64_t JobDescriptorsNeeded(int world_size);

// Whether every rank's automatic algorithm choice would be the same (PeerRecord::choice_*,
// as each rank's Communicator::choice_basis gave it): InvalidArgument naming the first rank
// that differs from rank 0, both ranks' calibration, and the other ranks that differ. JoinJob
// checks it once the ranks have met, so that a job whose ranks were given different
// calibrations fails to start on every rank, rather than in its first automatic call.
Status CheckAutomaticChoices(const std::vector<store::PeerRecord>& peers);

// What a rank publishes of its job-wide call defaults ("segment_bytes=0 deterministic=0"),
// and the check that every rank's are the same: ranks whose pipelining segments or canonical
// order differ build different schedules for the same call, whose messages do not match, and
// failed each call as diverged or stalled, blaming ranks that had made no mistake.
// InvalidArgument naming the first differing rank, both values and the flags to set alike.
std::string CallDefaults(const CommOptions& options);
Status CheckCallDefaults(const std::vector<store::PeerRecord>& peers);

StatusOr<Joined> JoinJob(const JoinOptions& options);

}  // namespace gyre::job
