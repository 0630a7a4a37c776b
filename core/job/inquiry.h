// Asking the other ranks what they are doing, over the control path, and classifying the
// answers: shared by the verdict on a failed operation and by the stall probe that looks
// for a mismatched call while an operation is merely quiet.
#pragma once

#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/base/status.h"
#include "core/exec/monitor.h"
#include "core/job/bootstrap.h"
#include "core/job/verdict.h"

namespace gyre::job {

struct Inquiry {
  Verdict verdict;
  std::vector<QueryResult> results;  // index = rank; this rank's own entry is empty
  int answered = 1;                  // ranks whose state is known, this one included
};

// This rank's side of the story, from its monitor (status and elapsed are the caller's).
LocalFailure LocalFailureOf(const OpSnapshot& snap, int rank, Duration progress_timeout);

// Queries every other rank (each bounded by `query_timeout`) and classifies. A divergence
// can be seen before every rank has made the diverging call; while the ranks that answered
// have not all reached it, asks again (up to `attempts` times, 100 ms apart) so that the
// majority, and so the rank named, is the same whoever asks.
// A stall probe's questions say so (`stall_probe`), naming me.seq: see StatusQuery.
Inquiry Inquire(const JobDirectory& dir, const LocalFailure& me, Duration query_timeout,
                int attempts, bool stall_probe = false);

// Delivers `text` as the verdict for operation `seq` to every rank that answered `inquiry`
// (the dead and the stalled cannot listen); their operation `seq` fails with it, as
// InvalidArgument for a mismatch (kMismatch: the caller's error, and a rank that completed
// `seq` reports it on its next call), Aborted otherwise.
void TellTheOthers(const JobDirectory& dir, int self, const Inquiry& inquiry, uint64_t seq,
                   const std::string& text, OpMonitor::AbortKind kind, Duration timeout);

// Tells every other rank that this rank's program went away without closing its
// communicator (`gone`: its pid, how, after which call; gone.rank is ignored): their verdict on
// a call that then fails without this rank names the program. Each rank bounded by `timeout`;
// the ranks that cannot be told (gone, stopped) are skipped. Returns how many were told.
int TellDeparture(const JobDirectory& dir, int self, const PeerDeparture& gone, Duration timeout);
// Tells every other rank that this rank refused its operation `seq` for its arguments
// (`text` says which and why) and so sent nothing in it (OpMonitor::AbortKind::kRefusal): a
// rank that needs this one in `seq` finds it out by its own wait and verdict; a rank where
// `seq` completes without it (the others of a gather whose root refused, a broadcast's root
// whose other ranks refused) reports it there or on its next call, Close included, rather than
// going on as if it had run. Each rank bounded by `timeout`; returns how many were told.
int TellRefusal(const JobDirectory& dir, int self, uint64_t seq, const std::string& text,
                Duration timeout);
// Tells every other rank that this rank found the ranks' calls at `seq` differ (a message of
// another call came for its own; `text` says which): as a verdict of a mismatch, so that a
// rank still in that call stops with it and one that completed it reports it on its next call,
// rather than failing later on this rank's going. Returns how many were told.
int TellDivergence(const JobDirectory& dir, int self, uint64_t seq, const std::string& text,
                   Duration timeout);
// PeerDeparture::how of a program that let go of its communicator without Comm::Close.
inline constexpr char kLeftWithoutClose[] = "destroyed its communicator without Comm::Close";

// The time allowed for one round of control queries under progress timeout `t`: quick
// enough not to stretch a failure much, long enough for a loaded machine.
Duration QueryTimeoutFor(Duration t);

}  // namespace gyre::job
