#include "core/job/bootstrap.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "core/base/fd_limit.h"
#include "core/base/thread.h"
#include "core/job/address.h"
#include "core/job/inquiry.h"
#include "core/job/stall_probe.h"
#include "core/job/verdict.h"
#include "core/transport/tcp/tcp_transport.h"
#include "glog/logging.h"

namespace gyre::job {

std::string ControlKey(const std::string& job_id, int rank) {
  return "gyre/control/" + job_id + "/" + std::to_string(rank);
}

namespace {

// Ticks a communicator's freeze watchdog (OpMonitor::Tick) every 20 ms from its creation until
// the job is joined, as the stall probe does from then on (with verdicts on; without them
// nothing reads the watchdog): a rank stopped while it waited at rendezvous and resumed after
// the others had given up on it then names itself, where it named the first rank it could
// not reach (they had exited). A freeze there counts like one in the first call: a whole
// machine paused that long at rendezvous, then a peer dying in the first call, would be
// taken for this rank's absence (a case left as it is).
class JoinTicker {
 public:
  JoinTicker() = default;
  // ResourceExhausted, naming `who`, when its thread cannot be started.
  Status Start(OpMonitor* monitor, const std::string& who) {
    return StartThread(&thread_, who, "the freeze watchdog while it joins", [this, monitor] {
      std::unique_lock<std::mutex> lock(mu_);
      while (!stop_) {
        monitor->Tick(SteadyClock::Get()->Now());
        cv_.wait_for(lock, std::chrono::milliseconds(20), [this] { return stop_; });
      }
    });
  }
  ~JoinTicker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  JoinTicker(const JoinTicker&) = delete;
  JoinTicker& operator=(const JoinTicker&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

StatusOr<Joined> JoinJob(const JoinOptions& o) {
  const Identity& id = o.identity;
  const std::string who = "rank " + std::to_string(id.rank) + " of job " + id.job_id;
  if (id.store_url.empty() && !o.store_factory) {
    return InvalidArgumentError(who +
                                ": no store given (--store file:///dir or tcp://host:port, "
                                "or GYRE_STORE, or MASTER_ADDR/MASTER_PORT)");
  }
  // Before anything is opened: a limit hit part way through connecting fails on some peer's
  // connection, and the verdict then names the wrong ranks.
  if (Status fds = EnsureFileDescriptors(JobDescriptorsNeeded(id.world_size),
                                         who + " (a job of " + std::to_string(id.world_size) +
                                             " ranks: two connections to each peer, and one more "
                                             "to each while it explains a failure)");
      !fds.ok()) {
    return fds;
  }
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), o.rendezvous_timeout);
  Joined joined;
  auth::Credentials credentials;
  credentials.secret = o.secret;
  if (credentials.secret.empty() && !id.secret_file.empty()) {
    auto secret = auth::LoadSecretFile(id.secret_file);
    if (!secret.ok()) return secret.status().WithContext(who);
    credentials.secret = std::move(*secret);
  }
  credentials.job_id = id.job_id;
  credentials.rank = id.rank;
  credentials.world_size = id.world_size;
  auto store =
      o.store_factory ? o.store_factory() : store::OpenStore(id.store_url, deadline, credentials);
  if (!store.ok()) {
    return store.status().WithContext(who + ": cannot open store " +
                                      (o.store_factory ? "(given by the caller)" : id.store_url));
  }
  joined.store = std::move(*store);

  TcpTransportOptions topts;
  topts.rank = id.rank;
  topts.world_size = id.world_size;
  topts.job_id = id.job_id;
  // An interface filter asks for routable addresses, which a loopback listener cannot serve.
  const std::string listen_host =
      !id.ifaces.empty() && IsLoopbackIp(o.listen_host) ? "0.0.0.0" : o.listen_host;
  topts.listen_host = listen_host;
  topts.listen_port = o.listen_port;
  topts.connect_timeout = std::max<Duration>(o.comm.timeout, Seconds(5));
  topts.secret = credentials.secret;
  auto transport = TcpTransport::Create(topts);
  if (!transport.ok()) return transport.status().WithContext(who);
  joined.address = (*transport)->address();
  auto plan = PlanAddresses(joined.address, id.ifaces, id.allow_loopback);
  if (!plan.ok()) return plan.status().WithContext(who + ": choosing the addresses to advertise");
  joined.address = plan->advertised.front();
  TcpTransport* tcp = transport->get();
  joined.comm = std::make_unique<Communicator>(std::move(*transport), o.comm);
  // Said before the rendezvous: otherwise the job ran until its first automatic call, and
  // failed there (seq 85, say) on the ranks that read the file.
  if (!o.comm.thresholds) {
    GYRE_RETURN_IF_ERROR(joined.comm->calibration_status().WithContext(who));
  }
  std::optional<JoinTicker> ticker(std::in_place);
  GYRE_RETURN_IF_ERROR(ticker->Start(joined.comm->monitor(), who));

  store::PeerRecord me;
  me.rank = id.rank;
  me.world_size = id.world_size;
  me.address = joined.address;
  me.addresses = plan->advertised;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  me.host = id.host.empty() ? host : id.host;
  me.pid = getpid();
  const ChoiceBasis& choice = joined.comm->choice_basis();
  me.choice_one_host = choice.one_host;
  me.choice_across_hosts = choice.across_hosts;
  me.choice_source = choice.source;
  me.call_defaults = CallDefaults(o.comm);

  // The control endpoint is up and published before the rendezvous completes, so once
  // everyone has arrived every control address can be read.
  joined.control = std::make_unique<ControlServer>(
      joined.comm.get(), RankInfo{id.rank, me.pid, me.host, joined.address}, credentials);
  GYRE_RETURN_IF_ERROR(joined.control->Start(listen_host).WithContext(who));
  // A listener on every interface is published at the first advertised address.
  const std::string control_address =
      HostPort(HostOf(joined.address), PortOf(joined.control->address()));
  // Published once this rank's slot is won: a second process given the same rank fails the
  // claim and must not replace the live owner's control address.
  bool published = false;
  auto publish_control = [&]() -> Status {
    published = true;
    if (!o.flight_dir.empty() && !id.launch_id.empty()) {
      // Best effort: without it, gyrerun marks this rank's exit in the store, which is only
      // slower.
      const int fd = ::open(JoinedNotePath(o.flight_dir, id.launch_id, id.rank).c_str(),
                            O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
      if (fd >= 0) ::close(fd);
    }
    return joined.store->Set(ControlKey(id.job_id, id.rank), control_address, deadline)
        .WithContext(who + ": publishing the control address");
  };
  if (o.before_rendezvous) o.before_rendezvous();
  auto peers = store::Rendezvous(joined.store.get(), id.job_id, me, deadline, publish_control,
                                 o.stop_requested, id.launch_id);
  if (!peers.ok()) {
    // As a rendezvous that timed out or was stopped gives the slot back: a retry must not read
    // this address.
    const StatusCode code = peers.status().code();
    if (published && (code == StatusCode::kDeadlineExceeded || code == StatusCode::kAborted ||
                      code == StatusCode::kUnavailable)) {
      joined.store
          ->Delete(ControlKey(id.job_id, id.rank), Deadline::After(*SteadyClock::Get(), Seconds(1)))
          .IgnoreError();
    }
    return peers.status();
  }
  joined.peers = *peers;
  auto dir = std::make_shared<JobDirectory>();
  dir->job_id = id.job_id;
  dir->credentials = credentials;
  dir->peers = joined.peers;
  // Each rank publishes its control address after its slot, so a rank may still be on its
  // way there: wait for all, then read them in one call (one round trip on a TcpStore, not
  // one per rank).
  std::vector<std::string> control_keys;
  for (int r = 0; r < id.world_size; ++r) control_keys.push_back(ControlKey(id.job_id, r));
  GYRE_RETURN_IF_ERROR(
      joined.store->Wait(control_keys, deadline).WithContext(who + ": control addresses"));
  auto addrs = store::ReadPublished(joined.store.get(), control_keys, deadline, [](size_t r) {
    return "the control address of rank " + std::to_string(r);
  });
  if (!addrs.ok()) return addrs.status().WithContext(who + ": reading the control addresses");
  dir->control_addresses = std::move(*addrs);
  // Every rank has its records and is past its rendezvous checks (it published its control
  // address after them), so all fail here alike, naming the same ranks.
  GYRE_RETURN_IF_ERROR(CheckAutomaticChoices(joined.peers).WithContext(who));
  GYRE_RETURN_IF_ERROR(CheckCallDefaults(joined.peers).WithContext(who));
  // Across hosts every peer's address is tried (over its control port, authenticated) and
  // every rank learns who could not reach whom, so all fail naming the same ranks.
  bool probe = SpansHosts(joined.peers);
  for (const auto& p : joined.peers) probe = probe || p.addresses.size() > 1;
  ProbeFn probe_fn;
  if (probe) {
    probe_fn = [&](int r, const std::string& a, Deadline d) -> Status {
      proto::ControlRequest q;
      q.mutable_status();
      const QueryResult res = QueryControl(HostPort(HostOf(a), PortOf(dir->control_addresses[r])),
                                           r, q, d.Remaining(*SteadyClock::Get()), credentials);
      if (res.reach == Reach::kAnswered) return Status::Ok();
      return UnavailableError(res.error.empty() ? "no answer" : res.error);
    };
  }
  auto chosen = ChoosePeerAddresses(joined.peers, id.rank, *plan, id.allow_loopback, probe_fn,
                                    deadline, "rendezvous of job " + id.job_id);
  if (probe) {
    GYRE_RETURN_IF_ERROR(ShareReachability(joined.store.get(), id.job_id, id.rank, id.world_size,
                                           chosen.status(), deadline));
  }
  if (!chosen.ok()) return chosen.status();
  const std::vector<std::string> addresses = *chosen;
  for (int r = 0; r < id.world_size; ++r) {
    dir->peers[r].address = addresses[r];
    dir->control_addresses[r] = HostPort(HostOf(addresses[r]), PortOf(dir->control_addresses[r]));
  }
  joined.peers = dir->peers;
  joined.directory = dir;
  // Across hosts, automatic choice may go hierarchical: it needs the ranks per host.
  if (SpansHosts(joined.peers)) joined.comm->SetLocalSize(RanksPerHost(joined.peers));
  GYRE_RETURN_IF_ERROR(tcp->SetPeers(addresses).WithContext(who));
  joined.comm->recorder()->Record(
      "join", 0, who + " joined as " + joined.address + ", control " + joined.control->address());
  ticker.reset();
  if (o.verdicts) {
    joined.comm->SetFailureHandler(
        MakeVerdictHandler(joined.comm.get(), dir, o.comm.timeout, o.flight_dir));
    // A query to every rank per refusal, or per divergence this rank finds itself, made
    // before the call returns: bounded, as the stall probe's rounds are, to jobs it can ask
    // in a moment.
    if (joined.comm->size() <= StallProbe::kMaxProbedWorld) {
      joined.comm->SetDivergenceHandler(
          [dir, self = joined.comm->rank(), timeout = QueryTimeoutFor(o.comm.timeout)](
              uint64_t seq, const std::string& verdict) {
            TellDivergence(*dir, self, seq, verdict, timeout);
          });
      joined.comm->SetRefusalHandler(
          [dir, self = joined.comm->rank(), timeout = QueryTimeoutFor(o.comm.timeout)](
              uint64_t seq, const Status& why) {
            TellRefusal(*dir, self, seq,
                        "rank " + std::to_string(self) + " refused seq=" + std::to_string(seq) +
                            " before it ran, so it sent nothing in it: " + why.message(),
                        timeout);
          });
    }
    joined.probe =
        std::make_shared<StallProbe>(joined.comm.get(), dir, o.comm.timeout, joined.control.get());
    GYRE_RETURN_IF_ERROR(joined.probe->Start().WithContext(who));
  }
  return joined;
}

namespace {

// The ranks whose `value(record)` differs from rank 0's, ascending; a rank saying `unsaid`
// (a record of an older build) differs from none, nor does any when rank 0 says it.
template <typename Value, typename T>
std::vector<int> RanksDifferingFromTheFirst(const std::vector<store::PeerRecord>& peers,
                                            const Value& value, const T& unsaid) {
  std::vector<int> differ;
  const T first = value(peers.front());
  if (first == unsaid) return differ;
  for (const store::PeerRecord& r : peers) {
    const T mine = value(r);
    if (mine != unsaid && mine != first) differ.push_back(r.rank);
  }
  return differ;
}

}  // namespace

Status CheckAutomaticChoices(const std::vector<store::PeerRecord>& peers) {
  if (peers.size() < 2) return Status::Ok();
  const int p = static_cast<int>(peers.size());
  // As the Communicator will see the job: across hosts in equal blocks, or not.
  const int local = SpansHosts(peers) ? RanksPerHost(peers) : 0;
  const bool across = local > 1 && local < p;
  auto digest = [across](const store::PeerRecord& r) {
    return across ? r.choice_across_hosts : r.choice_one_host;
  };
  // 0: a rank that did not say (a record of a build before the digest).
  const std::vector<int> differ = RanksDifferingFromTheFirst(peers, digest, uint64_t{0});
  if (differ.empty()) return Status::Ok();
  const store::PeerRecord& first = peers.front();
  const store::PeerRecord& other = peers[differ.front()];
  const bool hosts = other.host != first.host;
  std::string text = "rank " + std::to_string(other.rank) + "'s cost model (" +
                     other.choice_source + (hosts ? ", on host " + other.host : "") +
                     ") differs from rank " + std::to_string(first.rank) + "'s (" +
                     first.choice_source + (hosts ? ", on host " + first.host : "") + ")";
  if (other.choice_source == first.choice_source) text += ", the same source with other contents";
  if (differ.size() > 1) {
    text += "; so does that of " +
            store::FormatRankList(std::vector<int>(differ.begin() + 1, differ.end()));
  }
  return InvalidArgumentError(
      text +
      ": the ranks would choose different algorithms for the same call; give every rank the "
      "same calibration (GYRE_CALIBRATION, gyred --calibration) and the same online tuning "
      "switch (--tune, GYRE_TUNE)");
}

std::string CallDefaults(const CommOptions& options) {
  return "segment_bytes=" + std::to_string(options.segment_bytes) +
         " deterministic=" + (options.deterministic ? "1" : "0");
}

Status CheckCallDefaults(const std::vector<store::PeerRecord>& peers) {
  if (peers.size() < 2) return Status::Ok();
  // Empty: a rank that did not say (a record of a build before the field).
  const std::vector<int> differ = RanksDifferingFromTheFirst(
      peers, [](const store::PeerRecord& r) { return r.call_defaults; }, std::string());
  if (differ.empty()) return Status::Ok();
  const store::PeerRecord& first = peers.front();
  const store::PeerRecord& other = peers[differ.front()];
  std::string text = "rank " + std::to_string(other.rank) + "'s call defaults (" +
                     other.call_defaults + ") differ from rank " + std::to_string(first.rank) +
                     "'s (" + first.call_defaults + ")";
  if (differ.size() > 1) {
    text += "; so do those of " +
            store::FormatRankList(std::vector<int>(differ.begin() + 1, differ.end()));
  }
  return InvalidArgumentError(
      text +
      ": the ranks would cut or order the same call differently and their messages would not "
      "match; give every rank the same --segment_bytes (GYRE_SEGMENT_BYTES) and --deterministic "
      "(GYRE_DETERMINISTIC)");
}

Status LeaveJob(const Joined& joined, Deadline deadline) {
  const int rank = joined.comm->rank();
  const std::string& job_id = joined.directory->job_id;
  GYRE_RETURN_IF_ERROR(
      store::LeaveRendezvous(joined.store.get(), job_id, joined.peers[rank], deadline));
  for (const std::string& key : {ControlKey(job_id, rank), ReachKey(job_id, rank)}) {
    Status removed = joined.store->Delete(key, deadline);
    if (!removed.ok() && removed.code() != StatusCode::kNotFound) {
      return removed.WithContext("rank " + std::to_string(rank) + " of job " + job_id +
                                 " removing " + store::QuoteKey(key));
    }
  }
  return Status::Ok();
}

void LeaveJobOrWarn(const Joined& joined, const std::string& log_prefix) {
  const Status left = LeaveJob(joined, Deadline::After(*SteadyClock::Get(), Seconds(2)));
  if (!left.ok()) LOG(WARNING) << log_prefix << "its records stay in the store: " << left;
}

namespace {

// Out of space or descriptors is ResourceExhausted (a verdict names the resource); a folder
// that is a file, missing or not writable is the flight folder's fault.
Status CannotWrite(const std::string& path, int err) {
  const std::string why = "cannot write " + path + ": " + std::strerror(err);
  const bool exhausted = err == ENOSPC || err == EDQUOT || err == EMFILE || err == ENFILE ||
                         err == ENOMEM || err == EFBIG;
  return exhausted ? ResourceExhaustedError(why) : InvalidArgumentError(why);
}

}  // namespace

std::string JoinedNotePath(const std::string& flight_dir, const std::string& launch_id, int rank) {
  return flight_dir + "/joined-rank" + std::to_string(rank) + "." + launch_id;
}

StatusOr<std::string> WriteFlightRecord(Communicator* comm, const std::string& dir) {
  const std::string path = dir + "/flight-rank" + std::to_string(comm->rank()) + ".json";
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return CannotWrite(tmp, errno);
  const std::string json = comm->recorder()->DumpJson(comm->rank()) + "\n";
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());  // a partial record left behind would look like a record
    return CannotWrite(path, err);
  }
  return path;
}

uint64_t JobDescriptorsNeeded(int world_size) {
  return 3 * static_cast<uint64_t>(std::max(world_size - 1, 0)) + 64;
}

Duration VerdictTurnWait(int rank, int size, Duration progress_timeout) {
  if (size <= kAllAskAtOnce) return Duration::zero();
  return QueryTimeoutFor(progress_timeout) * std::clamp(rank, 0, 16) / 4;
}

Communicator::FailureHandler MakeVerdictHandler(Communicator* comm,
                                                std::shared_ptr<const JobDirectory> dir,
                                                Duration progress_timeout, std::string flight_dir) {
  return [comm, dir, progress_timeout, flight_dir](const OpResult& failed) -> Status {
    auto dump = [&] {
      if (flight_dir.empty()) return;
      // The failure is reported whatever happens here; a record that cannot be written (a
      // full disk) is said, so its absence from gyrerun's summary is explained.
      if (StatusOr<std::string> written = WriteFlightRecord(comm, flight_dir); !written.ok()) {
        LOG(WARNING) << "rank " << comm->rank()
                     << ": the flight record was not written: " << written.status();
      }
    };
    const int self = comm->rank();
    const TimePoint now = SteadyClock::Get()->Now();
    // What this rank knows of its failed call, and how long its process did not run.
    auto local_failure = [&](const OpSnapshot& snap) {
      LocalFailure me = LocalFailureOf(snap, self, progress_timeout);
      me.seq = failed.seq;
      me.status = failed.status;
      me.elapsed = failed.elapsed;
      me.frozen = comm->monitor()->FrozenSince(comm->monitor()->last_success_start(), now);
      me.frozen_in_call = comm->monitor()->FrozenSince(now - failed.elapsed, now);
      return me;
    };
    // Records the verdict, writes the flight record, and gives the failure its explanation.
    // `v` is the verdict this rank classified itself, whose blamed rank the record keeps in
    // a form gyrerun reads (a verdict told by another rank is in that rank's record).
    auto explained = [&](const std::string& verdict, const Verdict* v) {
      comm->recorder()->Record("verdict", failed.seq, verdict);
      RecordBlame(comm->recorder(), failed.seq, v, comm->rank());
      dump();
      return Status(failed.status.code(), verdict + " [rank " + std::to_string(self) +
                                              " saw: " + failed.status.message() + "]");
    };
    // An operation stopped by another rank's verdict already carries it, unless this rank's
    // own process did not run for longer than the others waited: resumed while another rank
    // was still asking, it answered and was told that rank's view ("rank 1 not entered", or a
    // rank that left meanwhile), which is their reaction to its absence. It names itself, as
    // Classify would; the told text follows. A told mismatch stands.
    if (comm->monitor()->StoppedByAbort(failed.seq, failed.status)) {
      const OpSnapshot snap = comm->monitor()->Snapshot();
      if (failed.status.code() == StatusCode::kAborted && snap.failed_seq == failed.seq) {
        const LocalFailure me = local_failure(snap);
        if (NotRunningLongEnoughToBlameOthers(me)) {
          const Verdict own = Classify(me, std::vector<PeerView>(comm->size()));
          return explained(own.text, &own);
        }
      }
      dump();
      return failed.status;
    }
    // A caller error (bad arguments) involves nobody else.
    if (failed.status.code() == StatusCode::kInvalidArgument &&
        failed.status.message().find("mismatch") == std::string::npos) {
      return failed.status;
    }
    const OpSnapshot snap = comm->monitor()->Snapshot();
    if (snap.failed_seq != failed.seq) return failed.status;  // never started (e.g. no schedule)
    const LocalFailure me = local_failure(snap);
    const Duration query_timeout = QueryTimeoutFor(progress_timeout);
    // One stuck rank makes every rank time out at once, and each asking every other was p^2
    // queries against control endpoints that serve kMaxActive at a time: answers timed out,
    // and healthy ranks were named as stalled (64 ranks, one stopped: five ranks blamed).
    // In larger jobs the ranks ask in turn, about four per query timeout (from rank 16 on,
    // after four), and a rank takes the verdict another rank delivers while it waits. Only
    // for a wait that ran into the progress timeout: a failure seen early (a reset from a
    // dead rank) is this rank's own to explain at once.
    const int p = comm->size();
    const bool timed_out = failed.status.code() == StatusCode::kDeadlineExceeded &&
                           failed.elapsed >= progress_timeout / 2;
    // A rank that did not run itself (stopped, then resumed) names itself (verdict.cc); the
    // verdict the others found meanwhile would blame it only as "stalled", or a victim.
    if (timed_out && !NotRunningLongEnoughToBlameOthers(me) && p > kAllAskAtOnce) {
      const TimePoint until = now + VerdictTurnWait(self, p, progress_timeout);
      while (SteadyClock::Get()->Now() < until) {
        if (std::optional<Status> told = comm->monitor()->VerdictReceived(failed.seq)) {
          return explained(told->message(), nullptr);
        }
        std::this_thread::sleep_for(Millis(5));
      }
    }
    Inquiry in = Inquire(*dir, me, query_timeout, /*attempts=*/10);
    const Verdict& v = in.verdict;
    // The rank at fault went (dead, left), but a verdict came first about a call this rank
    // has not reached: the one that rank, or another, sent before going (a rank whose Close
    // found that it diverged here, say, tells the others and exits). That is the cause, and
    // the going its consequence; every survivor holds the same verdict, so none is told.
    if (v.root_class == RankClass::kDead || v.root_class == RankClass::kLeft) {
      if (std::optional<Status> told = comm->monitor()->VerdictReceived(failed.seq)) {
        return Status(told->code(), explained(told->message(), nullptr).message());
      }
    }
    // Mismatched calls are told as such: a rank that completed the call without seeing the
    // mismatch (a broadcast root) then reports it on its next call.
    const bool mismatch =
        v.root_class == RankClass::kDiverged || v.root_class == RankClass::kRefused;
    TellTheOthers(*dir, self, in, failed.seq, v.text,
                  mismatch ? OpMonitor::AbortKind::kMismatch : OpMonitor::AbortKind::kFailure,
                  query_timeout);
    return explained(v.text, &v);
  };
}

}  // namespace gyre::job
