#include "core/job/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <system_error>
#include <thread>

#include "core/auth/fd_handshake.h"
#include "core/base/thread.h"
#include "core/ipc/ipc.h"
#include "core/job/verdict.h"
#include "core/transport/tcp/socket_options.h"
#include "glog/logging.h"

namespace gyre::job {

std::string StopStateOf(const std::string& stat) {
  // "pid (command) S ...": the command may hold spaces and parentheses, the state follows
  // the last ')'.
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return "";
  switch (stat[paren + 2]) {
    case 'T':
      return "stopped by a signal";
    case 't':
      return "stopped by a tracer";
    default:
      return "";
  }
}

namespace {

std::string StopStateOfProcess(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  return StopStateOf(line);
}

}  // namespace

proto::RankState StateOf(const OpSnapshot& s, const RankInfo& info) {
  proto::RankState st;
  st.set_rank(info.rank);
  st.set_pid(info.pid);
  st.set_host(info.host);
  st.set_data_address(info.data_address);
  st.set_in_op(s.in_op);
  st.set_seq(s.seq);
  st.set_last_started_seq(s.last_started_seq);
  st.set_last_completed_seq(s.last_completed_seq);
  st.set_collective(s.desc.collective);
  st.set_dtype(s.desc.dtype);
  st.set_reduce_op(s.desc.reduce_op);
  st.set_algorithm(s.desc.algorithm);
  st.set_root(s.desc.root);
  st.set_count(s.desc.count);
  st.set_op_name(s.op_name);
  st.set_steps_done(s.steps_done);
  st.set_steps_total(s.steps_total);
  st.set_waiting_on(s.waiting_on);
  st.set_bytes_received(s.bytes_received);
  st.set_bytes_expected(s.bytes_expected);
  st.set_seconds_since_progress(std::chrono::duration<double>(s.since_progress).count());
  st.set_last_error(s.last_error);
  st.set_failed_seq(s.failed_seq);
  st.set_refused_seq(s.refused_seq);
  st.set_exhausted_seq(s.exhausted_seq);
  st.set_exhausted_error(s.exhausted_error);
  for (const CallRecord& c : s.recent) {
    proto::CallRecord* r = st.add_recent();
    r->set_seq(c.seq);
    r->set_collective(c.desc.collective);
    r->set_dtype(c.desc.dtype);
    r->set_reduce_op(c.desc.reduce_op);
    r->set_algorithm(c.desc.algorithm);
    r->set_root(c.desc.root);
    r->set_count(c.desc.count);
    r->set_op_name(c.op_name);
  }
  return st;
}

ControlServer::ControlServer(Communicator* comm, RankInfo info, auth::Credentials credentials)
    : comm_(comm), info_(std::move(info)), credentials_(std::move(credentials)) {
  credentials_.rank = info_.rank;
  credentials_.world_size = 0;  // gyrectl connects too; it is not a rank
}

ControlServer::~ControlServer() { Stop(); }

Status ControlServer::Start(const std::string& host) {
  GYRE_ASSIGN_OR_RETURN(listen_fd_, ipc::ListenTcp(host, 0, &address_));
  return StartThread(&thread_, "rank " + std::to_string(info_.rank), "its control endpoint",
                     [this] { Loop(); });
}

void ControlServer::Stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  // Connection handlers are short (bounded by their deadlines); wait for them.
  const TimePoint give_up = SteadyClock::Get()->Now() + Seconds(3);
  while (active_ > 0 && SteadyClock::Get()->Now() < give_up) {
    std::this_thread::sleep_for(Millis(5));
  }
}

void ControlServer::Loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(Millis(50));  // the connection stays queued: no spinning
      }
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(handshaking_mu_);
      if (active_ >= kMaxActive) {
        ++over_cap_;
        ++refused_;
        std::optional<int> oldest;
        if (active_ < 2 * kMaxActive) oldest = handshaking_.TakeOldest();
        if (!oldest) {
          // Every slot holds a proven connection, or cut-off ones are still ending (they
          // count as active until their handlers return): the newcomer goes.
          ::close(fd);
          continue;
        }
        // The longest handshake is cut off for the newcomer; its handler closes it.
        ::shutdown(*oldest, SHUT_RDWR);
      }
      handshaking_.Add(fd);
    }
    ++active_;
    try {
      std::thread([this, fd] {
        Handle(fd);
        --active_;
      }).detach();
    } catch (const std::system_error& e) {
      // No thread to be had (memory or the process limit): this connection goes, the rank
      // goes on. A stranger's connections must not end the rank.
      {
        std::lock_guard<std::mutex> lock(handshaking_mu_);
        handshaking_.Remove(fd);
      }
      ::close(fd);
      --active_;
      ++refused_;
      LOG_EVERY_N(WARNING, 100) << "control endpoint: cannot start a thread for a connection ("
                                << e.what() << "); it is closed";
    }
  }
}

ControlServer::HeardProbes ControlServer::heard_probes() const {
  std::lock_guard<std::mutex> lock(heard_mu_);
  return heard_;
}

bool ControlServer::Proven(int fd) {
  std::lock_guard<std::mutex> lock(handshaking_mu_);
  return handshaking_.Remove(fd);
}

void ControlServer::Handle(int fd) {
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), Seconds(2));
  auth::Refusal refusal;
  // Off the handshake list once the proof checks out, before the querier is told it is in (or
  // after a failed handshake): from then on the fd is never cut off, and no later shutdown()
  // may reach a descriptor number that closing this one frees.
  bool listed = true;
  bool taken_off = false;
  auto proven = [&] {
    taken_off = true;
    listed = Proven(fd);
    return listed;
  };
  const Status handshake = auth::AcceptOnFd(fd, auth::Channel::kControl, credentials_,
                                            &replay_guard_, deadline, &refusal, proven);
  const bool accepted = handshake.ok();
  if (!taken_off) proven();
  if (!listed) {
    ::close(fd);  // cut off at the cap (counted there)
    return;
  }
  if (!accepted) {
    // A stranger, another job or a replay: closed without a word to it, counted, and logged
    // with the reason, as the data port, the store and the client socket log theirs.
    ++refused_;
    comm_->recorder()->Record("control_refused", 0, auth::RefusalName(refusal));
    // A connection its connector closed before proving anything is most often another rank's
    // or gyrectl's query that gave up while this process was slow: not a warning.
    int64_t held_back = 0;
    if (refusal_log_.Allow(SteadyClock::Get()->Now(), &held_back)) {
      (refusal == auth::Refusal::kAbandoned ? LOG(INFO) : LOG(WARNING))
          << "rank " << info_.rank << " refused a control connection from " << PeerAddress(fd)
          << ": " << handshake.message() << " [" << auth::RefusalName(refusal) << "]"
          << (refusal == auth::Refusal::kAbandoned
                  ? " (its connector closed it first: a query that gave up waiting, or a scan)"
                  : "")
          << refusal_log_.HeldBackNote(held_back);
    }
    ::close(fd);
    return;
  }
  proto::ControlRequest req;
  Status s = ipc::ReadMessage(fd, &req, deadline, "control request");
  if (s.ok()) {
    proto::ControlResponse resp;
    if (req.has_abort()) {
      const auto& a = req.abort();
      const bool known = a.code() != 0 && IsKnownStatusCode(a.code());
      Status reason(known ? static_cast<StatusCode>(a.code()) : StatusCode::kAborted,
                    (a.from_rank() == info_.rank ? a.verdict()
                                                 : VerdictAsRelayed(a.verdict(), a.from_rank())) +
                        " [verdict from rank " + std::to_string(a.from_rank()) +
                        ", received on rank " + std::to_string(info_.rank) + "]");
      comm_->recorder()->Record("abort_received", a.seq(),
                                "from rank " + std::to_string(a.from_rank()) + ": " + a.verdict());
      comm_->monitor()->Abort(a.seq(), reason,
                              a.refusal()    ? OpMonitor::AbortKind::kRefusal
                              : a.mismatch() ? OpMonitor::AbortKind::kMismatch
                                             : OpMonitor::AbortKind::kFailure);
    }
    if (req.has_departure()) {
      const auto& d = req.departure();
      // Sent by the departed rank's daemon, which the handshake proved to be of this job; the
      // text is that daemon's, cut to a line.
      if (d.from_rank() >= 0 && d.from_rank() < comm_->size() && d.from_rank() != info_.rank) {
        PeerDeparture gone;
        gone.rank = d.from_rank();
        gone.program_pid = d.program_pid();
        gone.how = d.how().substr(0, 512);
        gone.last_completed_seq = d.last_completed_seq();
        gone.on_purpose = d.on_purpose();
        comm_->recorder()->Record(gone.on_purpose ? "peer_program_left" : "peer_program_gone",
                                  d.last_completed_seq(),
                                  "rank " + std::to_string(gone.rank) + "'s program (pid " +
                                      std::to_string(gone.program_pid) + "): " + gone.how);
        comm_->monitor()->NoteDeparture(std::move(gone));
      }
    }
    if (req.has_status() && req.status().probing_seq() != 0) {
      {
        std::lock_guard<std::mutex> lock(heard_mu_);
        heard_.seq_plus_one = req.status().probing_seq();
        ++heard_.count;
      }
      comm_->recorder()->Record(
          "probe_heard", req.status().probing_seq() - 1,
          "a stall probe from rank " + std::to_string(req.status().from_rank()));
    }
    if (req.has_dump()) resp.set_dump_json(comm_->recorder()->DumpJson(info_.rank));
    OpSnapshot snap = comm_->monitor()->Snapshot();
    // A message this rank dropped for want of memory names it at once, in a call it may not
    // have reached yet; its own call fails on the dropped connection once it gets there.
    if (const auto dropped = comm_->transport()->LastExhaustion();
        dropped && dropped->seq > snap.exhausted_seq) {
      snap.exhausted_seq = dropped->seq;
      snap.exhausted_error = dropped->why;
    }
    *resp.mutable_state() = StateOf(snap, info_);
    if (const int64_t program = program_pid_.load(); program > 0) {
      resp.mutable_state()->set_program_pid(program);
      resp.mutable_state()->set_program_state(StopStateOfProcess(program));
    }
    size_t waiting = 0;
    for (const MessageWait& w : comm_->WaitingMessages(4, &waiting)) {
      proto::WaitingMessage* out = resp.mutable_state()->add_waiting();
      out->set_name(w.name);
      out->set_peer(w.peer);
      out->set_send(w.send);
      out->set_seconds(std::chrono::duration<double>(w.waited).count());
    }
    resp.mutable_state()->set_waiting_count(static_cast<int32_t>(waiting));
    ipc::WriteMessage(fd, resp, deadline, "control response").IgnoreError();
  }
  ::close(fd);
}

Reach ClassifyConnectFailure(const Status& s) {
  const std::string& m = s.message();
  auto has = [&m](const char* what) { return m.find(what) != std::string::npos; };
  // Refused, or reset by a listener that is being torn down: nothing will answer.
  if (has("refused") || has("reset")) return Reach::kRefused;
  // A connect that times out never reached a listening kernel; EINVAL is what a blackhole
  // route gives, EHOSTUNREACH / ENETUNREACH a missing one.
  if (s.code() == StatusCode::kDeadlineExceeded || has("unreachable") || has("Invalid argument") ||
      has("No route")) {
    return Reach::kUnreachable;
  }
  return Reach::kError;
}

QueryResult QueryControl(const std::string& address, int target_rank,
                         const proto::ControlRequest& request, Duration timeout,
                         const auth::Credentials& credentials) {
  QueryResult r;
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), timeout);
  auto fd = ipc::ConnectTcp(address, deadline);
  if (!fd.ok()) {
    r.error = fd.status().message();
    r.reach = ClassifyConnectFailure(fd.status());
    return r;
  }
  auth::Credentials self = credentials;
  self.world_size = 0;
  Status s = auth::ConnectOnFd(*fd, auth::Channel::kControl, self, target_rank, deadline,
                               "control connection to " + address);
  if (s.ok()) s = ipc::WriteMessage(*fd, request, deadline, "control request to " + address);
  if (s.ok()) s = ipc::ReadMessage(*fd, &r.response, deadline, "control answer from " + address);
  ::close(*fd);
  if (s.ok()) {
    r.reach = Reach::kAnswered;
  } else {
    r.error = s.message();
    // Connected, then the connection broke (closed, reset, broken pipe: every such failure
    // is Unavailable): the process is exiting or gone, as when the connect is refused.
    r.reach = s.code() == StatusCode::kDeadlineExceeded                        ? Reach::kSilent
              : s.message().find("refused the handshake") != std::string::npos ? Reach::kError
              : s.code() == StatusCode::kUnavailable                           ? Reach::kRefused
                                                                               : Reach::kError;
  }
  return r;
}

std::vector<QueryResult> QueryAll(const std::vector<std::string>& addresses,
                                  const proto::ControlRequest& request, Duration timeout,
                                  const auth::Credentials& credentials) {
  std::vector<QueryResult> results(addresses.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < addresses.size(); ++i) {
    if (addresses[i].empty()) continue;
    auto query = [&, i] {
      results[i] = QueryControl(addresses[i], static_cast<int>(i), request, timeout, credentials);
    };
    std::thread t;
    if (StartThread(&t, "", "", query).ok()) {
      threads.push_back(std::move(t));
    } else {
      // No thread to be had: this one asks, in turn. Slower, but each query is bounded by
      // `timeout` and the answers are the same.
      query();
    }
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace gyre::job
