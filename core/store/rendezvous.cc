#include "core/store/rendezvous.h"

#include <glog/logging.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "core/store/prefix_store.h"
#include "core/store/store_internal.h"
#include "proto/store.pb.h"

namespace gyre::store {
namespace {

using internal::CallTimer;

std::string Encode(const PeerRecord& record) {
  proto::PeerRecordProto p;
  p.set_rank(record.rank);
  p.set_world_size(record.world_size);
  // Several addresses travel comma-separated in the one field, so records stay readable by
  // ranks that know only one address.
  std::string joined = record.address;
  if (!record.addresses.empty()) {
    joined.clear();
    for (const auto& a : record.addresses) joined += (joined.empty() ? "" : ",") + a;
  }
  p.set_address(joined);
  p.set_host(record.host);
  p.set_pid(record.pid);
  p.set_nonce(record.nonce);
  p.set_process(record.process);
  p.set_choice_one_host(record.choice_one_host);
  p.set_choice_across_hosts(record.choice_across_hosts);
  p.set_choice_source(record.choice_source);
  p.set_call_defaults(record.call_defaults);
  return p.SerializeAsString();
}

bool Decode(const std::string& bytes, PeerRecord* record) {
  proto::PeerRecordProto p;
  if (!p.ParseFromString(bytes)) return false;
  record->rank = p.rank();
  record->world_size = p.world_size();
  record->addresses.clear();
  size_t start = 0;
  const std::string& all = p.address();
  while (start <= all.size() && !all.empty()) {
    const size_t comma = all.find(',', start);
    const size_t end = comma == std::string::npos ? all.size() : comma;
    if (end > start) record->addresses.push_back(all.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  record->address = record->addresses.empty() ? "" : record->addresses.front();
  record->host = p.host();
  record->pid = p.pid();
  record->nonce = p.nonce();
  record->process = p.process();
  record->choice_one_host = p.choice_one_host();
  record->choice_across_hosts = p.choice_across_hosts();
  record->choice_source = p.choice_source();
  record->call_defaults = p.call_defaults();
  return true;
}

std::string ReadFirstLine(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return "";
  char buf[1024] = {0};
  const bool got = std::fgets(buf, sizeof(buf), f) != nullptr;
  std::fclose(f);
  std::string line = got ? buf : "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// Field 22 of /proc/<pid>/stat (after the command name, which may hold spaces); empty if
// the process does not exist.
std::string StartTime(int64_t pid) {
  const std::string stat = ReadFirstLine("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return "";
  std::istringstream rest(stat.substr(paren + 1));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
  }
  return field;
}

// "<boot id> <pid namespace> <pid> <start time>" of this process; empty if unknown.
std::string ThisProcess() {
  const std::string boot = ReadFirstLine("/proc/sys/kernel/random/boot_id");
  char ns[256] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/pid", ns, sizeof(ns) - 1);
  const int64_t pid = ::getpid();
  const std::string start = StartTime(pid);
  if (boot.empty() || n <= 0 || start.empty()) return "";
  return boot + " " + std::string(ns, static_cast<size_t>(n)) + " " + std::to_string(pid) + " " +
         start;
}

// Whether the process that wrote `theirs` has exited, as far as this one can tell: only on
// the same boot of the same machine and in the same pid namespace; a reused pid has another
// start time.
bool ProcessGone(const std::string& theirs, const std::string& mine) {
  std::istringstream a(theirs), b(mine);
  std::string boot_a, ns_a, boot_b, ns_b, start_a;
  int64_t pid_a = 0;
  if (!(a >> boot_a >> ns_a >> pid_a >> start_a) || !(b >> boot_b >> ns_b)) return false;
  if (boot_a != boot_b || ns_a != ns_b || pid_a <= 0) return false;
  // No such process at all; or one whose start time can be read and differs (the pid was
  // reused). One that exists but whose /proc entry is hidden (hidepid) is taken as alive.
  if (::kill(static_cast<pid_t>(pid_a), 0) != 0 && errno == ESRCH) return true;
  const std::string now = StartTime(pid_a);
  return !now.empty() && now != start_a;
}

std::string RandomNonce() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<uint64_t>(device()) << 32) ^ device());
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return buf;
}

Status CheckName(const char* what, const std::string& name) {
  if (name.empty()) return InvalidArgumentError(std::string(what) + " is empty");
  if (name.find('/') != std::string::npos) {
    return InvalidArgumentError(std::string(what) + " " + QuoteKey(name) +
                                " contains '/', which would let it overlap another's keys");
  }
  return Status::Ok();
}

// A rank's slot under the job's prefix, and every slot of a world.
std::string SlotKey(int rank) { return "rank/" + std::to_string(rank); }
std::vector<std::string> SlotKeys(int world_size) {
  std::vector<std::string> keys;
  keys.reserve(world_size);
  for (int rank = 0; rank < world_size; ++rank) keys.push_back(SlotKey(rank));
  return keys;
}

// A launcher's marks of ranks whose process exited on its own (MarkExit), under the job's
// prefix: one per rank ("<launch id>\n<order>\n<what>"), the order its exits were marked in,
// and a count the waiting ranks poll, one key whatever the world size, raised once the mark
// is there.
std::string ExitMarkKey(int rank) { return "exited/" + std::to_string(rank); }
constexpr char kExitOrderKey[] = "exit_order";
constexpr char kExitCountKey[] = "exits";

// What a rank waiting at the rendezvous learns of the launcher's marks: asked between the
// slices of its wait, it reads the count (one key) and, only when that grew, the slots and
// the marks of the ranks still missing. A missing rank marked by this run's launcher will
// never come: Found says so, and `rank` and `what` name the first such exit.
class ExitWatch {
 public:
  ExitWatch(Store* job, const std::string& launch_id, const std::vector<std::string>& slots)
      : job_(job), launch_id_(launch_id), slots_(slots) {}

  bool Found(Deadline deadline) {
    if (launch_id_.empty()) return false;
    StatusOr<std::optional<std::string>> count = job_->TryGet(kExitCountKey, deadline);
    if (!count.ok() || !count->has_value() || **count == seen_count_) return false;
    seen_count_ = **count;
    const std::vector<StatusOr<std::optional<std::string>>> slots =
        TryGetEach(job_, slots_, deadline);
    std::vector<std::string> marks;
    std::vector<int> ranks;
    for (size_t rank = 0; rank < slots.size(); ++rank) {
      if (slots[rank].ok() && !slots[rank]->has_value()) {
        marks.push_back(ExitMarkKey(static_cast<int>(rank)));
        ranks.push_back(static_cast<int>(rank));
      }
    }
    if (marks.empty()) return false;
    const std::vector<StatusOr<std::optional<std::string>>> found =
        TryGetEach(job_, marks, deadline);
    // The first exit of those: a rank that gave up waiting for it gives its slot back and may
    // exit too, and every rank must name the one they all waited for, not that one.
    const std::string ours = launch_id_ + "\n";
    int64_t first_order = 0;
    for (size_t i = 0; i < found.size(); ++i) {
      if (!found[i].ok() || !found[i]->has_value()) continue;
      const std::string& mark = **found[i];
      if (mark.compare(0, ours.size(), ours) != 0) continue;  // an earlier run's
      const size_t end = mark.find('\n', ours.size());
      if (end == std::string::npos) continue;
      int64_t order = 0;
      try {
        order = std::stoll(mark.substr(ours.size(), end - ours.size()));
      } catch (const std::exception&) {
        continue;
      }
      if (rank >= 0 && order >= first_order) continue;
      first_order = order;
      rank = ranks[i];
      what = mark.substr(end + 1);
    }
    return rank >= 0;
  }

  int rank = -1;
  std::string what;

 private:
  Store* job_;
  const std::string launch_id_;
  const std::vector<std::string>& slots_;
  std::string seen_count_;
};

Status CheckRank(const std::string& where, int rank, int world_size) {
  if (world_size < 1 || world_size > kMaxWorldSize) {
    return InvalidArgumentError(where + ": world size " + std::to_string(world_size) +
                                " is not in 1.." + std::to_string(kMaxWorldSize));
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgumentError(where + ": rank " + std::to_string(rank) + " is not in 0.." +
                                std::to_string(world_size - 1));
  }
  return Status::Ok();
}

// How often a rank waiting at the rendezvous asks whether it was told to stop: one Wait per
// slice, and one more millisecond for every rank, so that a large job's ranks do not flood a
// TcpStore with their waits (1024 ranks: a Wait a second each).
Duration StopCheckSlice(size_t world_size) {
  return std::max<Duration>(Millis(200), Millis(static_cast<int64_t>(world_size)));
}

// store->Wait until `wait_deadline`, in slices that ask `stop_requested` between them (when
// given); *stopped is set, and the status is Aborted, when it said yes.
Status WaitUnlessStopped(Store* store, const std::vector<std::string>& keys, Deadline wait_deadline,
                         const std::function<bool()>& stop_requested, bool* stopped) {
  if (!stop_requested) return store->Wait(keys, wait_deadline);
  while (true) {
    if (stop_requested()) {
      *stopped = true;
      return AbortedError("stopped");
    }
    const Deadline slice = Deadline::After(*SteadyClock::Get(), StopCheckSlice(keys.size()));
    const bool last = !wait_deadline.infinite() && wait_deadline.when() <= slice.when();
    Status status = store->Wait(keys, last ? wait_deadline : slice);
    if (last || status.code() != StatusCode::kDeadlineExceeded) return status;
  }
}

// Waits until the key of every rank exists. On timeout, finds out which ranks are missing
// and names them; ranks that turn up during that check count as arrived.
Status WaitForRanks(Store* store, const std::string& where, const std::vector<std::string>& keys,
                    Deadline deadline, const CallTimer& timer,
                    const std::function<bool()>& stop_requested = {}, bool* stopped = nullptr,
                    ExitWatch* exits = nullptr) {
  Deadline wait_deadline = deadline;
  if (!deadline.infinite()) {
    Duration remaining = deadline.Remaining(*SteadyClock::Get());
    Duration reserve = std::min<Duration>(remaining / 20, Millis(50));
    wait_deadline = Deadline::At(deadline.when() - reserve);
  }
  bool stopped_here = false;
  std::function<bool()> stop = stop_requested;
  if (exits != nullptr) {
    stop = [&] {
      return (stop_requested && stop_requested()) ||
             exits->Found(Deadline::After(*SteadyClock::Get(), Seconds(1)).Min(wait_deadline));
    };
  }
  Status status = WaitUnlessStopped(store, keys, wait_deadline, stop, &stopped_here);
  if (stopped_here) {
    if (stopped != nullptr) *stopped = true;
    return status;
  }
  if (status.ok()) return status;
  if (status.code() != StatusCode::kDeadlineExceeded) return status.WithContext(where);
  // Which ranks are missing: only a slot the store says is empty counts. A rank whose slot
  // could not be read (the store stopped answering, or the reserve ran out) is unknown, not
  // missing, and the store's own error is given.
  // TryGetEach reads every slot in one call (a TcpStore splits it into requests itself) and,
  // should that fail, slot by slot, so the slots it can read are still known.
  std::vector<int> missing, unknown;
  Status unread;
  // A rank that claimed its slot with another world size failed on that at once (it found
  // the world size this job fixed): it is named, not counted as arrived.
  std::string conflicting;
  const std::vector<StatusOr<std::optional<std::string>>> values =
      TryGetEach(store, keys, deadline);
  for (size_t rank = 0; rank < keys.size(); ++rank) {
    const StatusOr<std::optional<std::string>>& value = values[rank];
    PeerRecord record;
    if (!value.ok()) {
      unknown.push_back(static_cast<int>(rank));
      if (unread.ok()) unread = value.status();
    } else if (!value->has_value()) {
      missing.push_back(static_cast<int>(rank));
    } else if (Decode(**value, &record) && record.world_size > 0 &&
               record.world_size != static_cast<int>(keys.size())) {
      conflicting += std::string(conflicting.empty() ? "" : ", ") + DescribePeer(record) +
                     " has world size " + std::to_string(record.world_size);
    }
  }
  if (!conflicting.empty()) {
    std::string text = where + ": the ranks disagree on the world size: this job's is " +
                       std::to_string(keys.size()) + ", but " + conflicting;
    if (!missing.empty()) text += "; missing " + timer.AfterText() + ": " + FormatRankList(missing);
    return InvalidArgumentError(text + " (store " + store->Describe() + ")");
  }
  if (missing.empty() && unknown.empty()) return Status::Ok();
  const size_t arrived = keys.size() - missing.size() - unknown.size();
  std::string text = where + ": ";
  if (missing.empty() && arrived == 0) {
    text += "the store " + store->Describe() + " did not answer " + timer.AfterText() +
            " (the slots of " + FormatRankList(unknown) +
            " could not be read: " + unread.message() + ")";
    return DeadlineExceededError(text);
  }
  text += std::to_string(arrived) + " of " + std::to_string(keys.size()) + " ranks arrived " +
          timer.AfterText();
  if (!missing.empty()) text += "; missing: " + FormatRankList(missing);
  if (!unknown.empty()) {
    text += "; not known (their slots could not be read in time: " + unread.message() +
            "): " + FormatRankList(unknown);
  }
  return DeadlineExceededError(text + " (store " + store->Describe() + ")");
}

}  // namespace

std::string DescribePeer(const PeerRecord& peer) {
  return "rank " + std::to_string(peer.rank) + " (host " + peer.host + ", pid " +
         std::to_string(peer.pid) + ")";
}

std::string FormatRankList(const std::vector<int>& ranks_in) {
  std::vector<int> ranks = ranks_in;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

namespace {

// The nonces of the records this process's last completed rendezvous of each job (in each
// store), as each rank, returned; see Rendezvous. (Per rank: tests run a job's ranks as
// threads of one process.)
std::mutex g_used_mu;
std::map<std::string, std::set<std::string>>& UsedRecordsMap() {
  static auto* used = new std::map<std::string, std::set<std::string>>();
  return *used;
}
std::set<std::string> UsedRecords(const std::string& store, const std::string& job_id, int rank) {
  std::lock_guard<std::mutex> lock(g_used_mu);
  auto it = UsedRecordsMap().find(store + "\n" + job_id + "\n" + std::to_string(rank));
  return it == UsedRecordsMap().end() ? std::set<std::string>() : it->second;
}
void RememberRecords(const std::string& store, const std::string& job_id, int rank,
                     const std::vector<PeerRecord>& records) {
  std::set<std::string> nonces;
  for (const PeerRecord& r : records) {
    if (!r.nonce.empty()) nonces.insert(r.nonce);
  }
  std::lock_guard<std::mutex> lock(g_used_mu);
  UsedRecordsMap()[store + "\n" + job_id + "\n" + std::to_string(rank)] = std::move(nonces);
}
// How often a rank whose slots still hold an earlier communicator's records reads them again.
constexpr std::chrono::milliseconds kBehindPoll{10};

}  // namespace

StatusOr<std::vector<PeerRecord>> Rendezvous(Store* store, const std::string& job_id,
                                             const PeerRecord& me, Deadline deadline,
                                             const std::function<Status()>& claimed,
                                             const std::function<bool()>& stop_requested,
                                             const std::string& launch_id) {
  CHECK(store != nullptr) << "Rendezvous needs a store";
  CallTimer timer(deadline);
  GYRE_RETURN_IF_ERROR(CheckName("rendezvous job id", job_id));
  const std::string where = "rendezvous of job " + job_id;
  GYRE_RETURN_IF_ERROR(CheckRank(where, me.rank, me.world_size));
  PeerRecord mine = me;
  if (mine.nonce.empty()) mine.nonce = RandomNonce();
  if (mine.process.empty()) mine.process = ThisProcess();
  const std::string encoded = Encode(mine);
  PrefixStore job(store, "gyre/rdzv/" + job_id);
  const std::string slot = SlotKey(mine.rank);
  const std::string rank_text = "rank " + std::to_string(mine.rank);
  if (stop_requested && stop_requested()) {
    return AbortedError(where + ": " + rank_text + " was stopped before it claimed its slot");
  }

  // Claiming the slot and publishing the record are one atomic step, so a record that is
  // present always belongs to the slot's one owner.
  StatusOr<std::string> claim = job.CompareSet(slot, "", encoded, deadline);
  if (!claim.ok()) {
    return claim.status().WithContext(where + ": rank " + std::to_string(mine.rank) +
                                      " claiming its slot");
  }
  if (*claim != encoded) {
    PeerRecord holder;
    if (!Decode(*claim, &holder)) {
      return InternalError(where + ": the slot of rank " + std::to_string(mine.rank) +
                           " holds an unreadable record");
    }
    if (!holder.process.empty() && holder.process == mine.process && holder.pid == mine.pid &&
        holder.host == mine.host) {
      // A communicator this very process made before, under this job id, that ended without
      // a Close that met every rank (destroyed with calls pending, say): "claimed twice by
      // pid P, now by pid P" left the reader to work that out.
      return AlreadyExistsError(
          where + ": the slot of rank " + std::to_string(mine.rank) +
          " holds the record of an earlier communicator of this same process (host " + holder.host +
          " pid " + std::to_string(holder.pid) +
          "), which ended without a Close that met every rank (destroyed with calls pending, "
          "or its Close failed), so its records stay in the store: a new communicator needs a "
          "new job id or an empty store (for a process group, a new init file or store) (" +
          store->Describe() + ")");
    }
    if (ProcessGone(holder.process, mine.process)) {
      return AlreadyExistsError(
          where + ": the slot of rank " + std::to_string(mine.rank) + " holds the record of " +
          DescribePeer(holder) +
          ", a process on this machine that is no longer running: an earlier run of this job "
          "id left it, one that did not finish cleanly: it failed, was stopped, or its program "
          "ended without Comm::Close (only a Close that meets every rank removes a rank's "
          "records). Start with a new job id or an empty store (" +
          store->Describe() + ")");
    }
    return AlreadyExistsError(where + ": rank " + std::to_string(mine.rank) +
                              " is claimed twice: first by host " + holder.host + " pid " +
                              std::to_string(holder.pid) + " (address " + holder.address +
                              "), now by host " + mine.host + " pid " + std::to_string(mine.pid) +
                              " (address " + mine.address +
                              "); if the first is gone, the store holds an earlier job's records "
                              "under this job id (pids are reused): start with a new job id or "
                              "an empty store");
  }

  // The first rank to get here fixes the world size; anyone disagreeing fails at once.
  StatusOr<std::string> fixed = job.CompareSet("world_size", "", encoded, deadline);
  if (!fixed.ok()) return fixed.status().WithContext(where + ": checking the world size");
  PeerRecord first;
  if (!Decode(*fixed, &first)) {
    return InternalError(where + ": the world size record is unreadable");
  }
  auto mismatch = [&](const PeerRecord& other) {
    return InvalidArgumentError(where + ": world size mismatch: " + DescribePeer(mine) +
                                " has world size " + std::to_string(mine.world_size) + ", " +
                                DescribePeer(other) + " has world size " +
                                std::to_string(other.world_size));
  };
  if (first.world_size != mine.world_size) return mismatch(first);
  // A record already in its slot whose writer has exited is an earlier job's record under
  // this job id, or its rank died while starting: said now, rather than as a connect
  // timeout to a dead address later. Checked after this rank's claim (before it, no record
  // may exist yet, and a store whose reads wait for its file to appear, as torch's FileStore
  // does, would block every rank) and before `claimed`: a rank that finishes the rendezvous
  // fast cannot exit before this check, as long as it waits for what `claimed` publishes,
  // as JoinJob's ranks wait for each other's control addresses. Without `claimed` nothing
  // holds a fast rank back, so there is no check. Checked only where the writer's exit can
  // be seen (same machine, same pid namespace).
  const std::vector<std::string> keys = SlotKeys(mine.world_size);
  // One TryGetMany: on a TcpStore a round trip per rank here made a 1024-rank rendezvous
  // take over a minute (p^2 requests to one server). One unreadable slot does not turn the
  // check off for the others.
  const bool check_stale = claimed && !mine.process.empty();
  const std::vector<StatusOr<std::optional<std::string>>> there =
      check_stale ? TryGetEach(&job, keys, deadline)
                  : std::vector<StatusOr<std::optional<std::string>>>();
  for (int rank = 0; rank < static_cast<int>(there.size()); ++rank) {
    const StatusOr<std::optional<std::string>>& slot = there[rank];
    if (rank == mine.rank || !slot.ok() || !slot->has_value()) continue;
    PeerRecord other;
    if (!Decode(**slot, &other) || !ProcessGone(other.process, mine.process)) continue;
    return UnavailableError(where + ": the slot of " + DescribePeer(other) +
                            " belongs to a process on this machine that is no longer running: "
                            "it exited while starting, or the store holds an earlier job's "
                            "records under this job id (start with a new job id or an empty "
                            "store)");
  }
  if (claimed) GYRE_RETURN_IF_ERROR(claimed());

  // This process's last rendezvous under this job id, if any, and the records it returned: a
  // slot that still holds one of them belongs to a rank that has not finished closing that
  // communicator (its Close removes its records after the others' Closes may have returned),
  // and must not be taken for its record in this one: its address is the old one.
  const std::set<std::string> used = UsedRecords(store->Describe(), job_id, mine.rank);
  std::vector<int> behind;
  for (;;) {
    bool stopped = false;
    ExitWatch exits(&job, launch_id, keys);
    if (Status waited = WaitForRanks(&job, where, keys, deadline, timer, stop_requested, &stopped,
                                     launch_id.empty() ? nullptr : &exits);
        stopped && exits.rank >= 0) {
      // A rank the launcher saw exit before it claimed its slot will never come: every rank
      // waiting for it says so at once, naming it, instead of at the rendezvous deadline.
      Status left =
          LeaveRendezvous(store, job_id, mine, Deadline::After(*SteadyClock::Get(), Seconds(2)));
      return UnavailableError(
          where + ": rank " + std::to_string(exits.rank) + " will not join: " + exits.what +
          ", before it claimed its rendezvous slot, so the job cannot start; " + rank_text +
          " stopped waiting " + timer.AfterText() + " (" +
          (left.ok() ? "it gave its slot back)"
                     : "its slot could not be given back: " + left.message() + ")"));
    } else if (stopped) {
      // The others cannot complete this rendezvous without this rank now; its slot is given
      // back at once, so that the job id can be used again. A rank still waiting names it
      // missing by its deadline, as it is.
      Status left =
          LeaveRendezvous(store, job_id, mine, Deadline::After(*SteadyClock::Get(), Seconds(2)));
      return AbortedError(where + ": " + rank_text + " was stopped while it waited for the other " +
                          "ranks " + timer.AfterText() + "; " +
                          (left.ok() ? "it gave its slot back"
                                     : "its slot could not be given back (" + left.message() +
                                           "): start the next run with a new job id or an empty "
                                           "store"));
    } else if (!waited.ok()) {
      // A rank that gave up waiting gives its slot back (and the world size record, if it
      // wrote that), so that a retry under the same job id finds it free rather than taken.
      // Only once its deadline has passed: every rank sharing it has named the missing ranks
      // by then, and must not count this one among them. A rank that comes later finds it
      // missing, as it is. Other failures keep the slot: they need the user, and the next run
      // names the exited process that holds it.
      if (waited.code() == StatusCode::kDeadlineExceeded) {
        const Duration left = deadline.Remaining(*SteadyClock::Get());
        if (left > Duration::zero()) std::this_thread::sleep_for(left);
        LeaveRendezvous(store, job_id, mine, Deadline::After(*SteadyClock::Get(), Seconds(1)))
            .IgnoreError();
      }
      return waited;
    }

    auto values = ReadPublished(&job, keys, deadline, [](size_t rank) {
      return "the record of rank " + std::to_string(rank);
    });
    if (!values.ok() && !behind.empty() && !deadline.Expired(*SteadyClock::Get())) {
      // A record of the earlier communicator went between the wait and the read.
      std::this_thread::sleep_for(kBehindPoll);
      continue;
    }
    if (!values.ok()) return values.status().WithContext(where + ": reading the ranks' records");
    std::vector<PeerRecord> records(mine.world_size);
    for (int rank = 0; rank < mine.world_size; ++rank) {
      const std::string& value = (*values)[rank];
      if (!Decode(value, &records[rank]) || records[rank].rank != rank) {
        return InternalError(where + ": the slot of rank " + std::to_string(rank) +
                             " holds an unreadable or misplaced record");
      }
      if (records[rank].world_size != mine.world_size) return mismatch(records[rank]);
    }
    behind.clear();
    for (int rank = 0; rank < mine.world_size; ++rank) {
      if (rank != mine.rank && used.count(records[rank].nonce) != 0) behind.push_back(rank);
    }
    if (behind.empty()) {
      RememberRecords(store->Describe(), job_id, mine.rank, records);
      return records;
    }
    if (deadline.Expired(*SteadyClock::Get())) {
      return DeadlineExceededError(
          where + ": the slot of " + FormatRankList(behind) + " still holds " +
          (behind.size() == 1 ? "its record" : "their records") +
          " from this process's earlier communicator under this job id " + timer.AfterText() +
          ": " + (behind.size() == 1 ? "that rank has" : "those ranks have") +
          " not finished closing it, or never made this communicator (store " + store->Describe() +
          ")");
    }
    std::this_thread::sleep_for(kBehindPoll);
  }
}

StatusOr<RendezvousState> ReadRendezvous(Store* store, const std::string& job_id,
                                         Deadline deadline) {
  CHECK(store != nullptr) << "ReadRendezvous needs a store";
  GYRE_RETURN_IF_ERROR(CheckName("rendezvous job id", job_id));
  PrefixStore job(store, "gyre/rdzv/" + job_id);
  RendezvousState state;
  StatusOr<std::optional<std::string>> fixed = job.TryGet("world_size", deadline);
  if (!fixed.ok()) return fixed.status().WithContext("reading the world size of job " + job_id);
  PeerRecord first;
  if (!fixed->has_value() || !Decode(**fixed, &first) ||
      !CheckRank("", first.rank, first.world_size).ok()) {
    return state;
  }
  state.world_size = first.world_size;
  const std::vector<StatusOr<std::optional<std::string>>> slots =
      TryGetEach(&job, SlotKeys(state.world_size), deadline);
  for (int rank = 0; rank < static_cast<int>(slots.size()); ++rank) {
    if (!slots[rank].ok()) {
      return slots[rank].status().WithContext("reading the rendezvous slot of rank " +
                                              std::to_string(rank) + " of job " + job_id);
    }
    if (slots[rank]->has_value()) state.joined.push_back(rank);
  }
  return state;
}

std::string RendezvousSlotKey(const std::string& job_id, int rank) {
  return PrefixStore::KeyUnder("gyre/rdzv/" + job_id, SlotKey(rank));
}

Status MarkExit(Store* store, const std::string& job_id, const std::string& launch_id, int rank,
                const std::string& what, Deadline deadline) {
  CHECK(store != nullptr) << "MarkExit needs a store";
  GYRE_RETURN_IF_ERROR(CheckName("rendezvous job id", job_id));
  if (launch_id.empty() || launch_id.find('\n') != std::string::npos) {
    return InvalidArgumentError("MarkExit: the launch id must be one non-empty line");
  }
  PrefixStore job(store, "gyre/rdzv/" + job_id);
  const std::string where =
      "marking the exit of rank " + std::to_string(rank) + " of job " + job_id;
  StatusOr<int64_t> order = job.Add(kExitOrderKey, 1, deadline);
  if (!order.ok()) return order.status().WithContext(where);
  GYRE_RETURN_IF_ERROR(
      job.Set(ExitMarkKey(rank), launch_id + "\n" + std::to_string(*order) + "\n" + what, deadline)
          .WithContext(where));
  return job.Add(kExitCountKey, 1, deadline).status().WithContext(where);
}

Status ClearExitMarks(Store* store, const std::string& job_id, const std::vector<int>& ranks,
                      Deadline deadline) {
  CHECK(store != nullptr) << "ClearExitMarks needs a store";
  GYRE_RETURN_IF_ERROR(CheckName("rendezvous job id", job_id));
  PrefixStore job(store, "gyre/rdzv/" + job_id);
  std::vector<std::string> keys = {kExitCountKey, kExitOrderKey};
  for (int rank : ranks) keys.push_back(ExitMarkKey(rank));
  for (const std::string& key : keys) {
    Status removed = job.Delete(key, deadline);
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
      return removed.WithContext("clearing the exit marks of job " + job_id);
    }
  }
  return Status::Ok();
}

Status LeaveRendezvous(Store* store, const std::string& job_id, const PeerRecord& me,
                       Deadline deadline) {
  CHECK(store != nullptr) << "LeaveRendezvous needs a store";
  GYRE_RETURN_IF_ERROR(CheckName("rendezvous job id", job_id));
  const std::string where = "leaving the rendezvous of job " + job_id;
  PrefixStore job(store, "gyre/rdzv/" + job_id);
  // Nothing else writes either key while it holds this rank's record (a second claimant
  // fails its claim), so reading it and then deleting it removes only this rank's own.
  const std::vector<std::string> keys = {SlotKey(me.rank), "world_size"};
  StatusOr<std::vector<std::optional<std::string>>> held = job.TryGetMany(keys, deadline);
  if (!held.ok()) return held.status().WithContext(where + ": reading its records");
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    PeerRecord holder;
    if (i >= held->size() || !(*held)[i].has_value() || !Decode(*(*held)[i], &holder) ||
        holder.rank != me.rank || holder.nonce != me.nonce || me.nonce.empty()) {
      continue;
    }
    Status removed = job.Delete(key, deadline);
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
      return removed.WithContext(where + ": removing " + QuoteKey(key));
    }
  }
  return Status::Ok();
}

Status StoreBarrier(Store* store, const std::string& job_id, const std::string& name, int rank,
                    int world_size, Deadline deadline) {
  CHECK(store != nullptr) << "StoreBarrier needs a store";
  CallTimer timer(deadline);
  GYRE_RETURN_IF_ERROR(CheckName("barrier job id", job_id));
  GYRE_RETURN_IF_ERROR(CheckName("barrier name", name));
  const std::string where = "barrier " + QuoteKey(name) + " of job " + job_id;
  GYRE_RETURN_IF_ERROR(CheckRank(where, rank, world_size));
  PrefixStore barrier(store, "gyre/barrier/" + job_id + "/" + name);
  GYRE_RETURN_IF_ERROR(
      barrier.Set(std::to_string(rank), "1", deadline).WithContext(where + ": entering"));
  std::vector<std::string> keys;
  keys.reserve(world_size);
  for (int r = 0; r < world_size; ++r) keys.push_back(std::to_string(r));
  return WaitForRanks(&barrier, where, keys, deadline, timer);
}

}  // namespace gyre::store
