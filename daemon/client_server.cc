#include "daemon/client_server.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "core/algo/collective.h"
#include "core/auth/fd_handshake.h"
#include "core/base/thread.h"
#include "core/ipc/doorbell.h"
#include "core/ipc/ipc.h"
#include "core/job/inquiry.h"
#include "glog/logging.h"
#include "proto/client.pb.h"

namespace gyre::daemon {

namespace {

// What the call that just ran did, for the client's CallInfo.
void Report(const OpResult& r, proto::ClientResponse* resp) {
  resp->set_algorithm(static_cast<int>(r.spec.algorithm));
  resp->set_seq(r.seq);
  resp->set_elapsed_ns(r.elapsed.count());
  resp->set_bytes_sent(r.counters.bytes_sent());
  resp->set_msgs_sent(r.counters.msgs_sent());
  resp->set_bytes_recv(r.counters.bytes_recv());
  resp->set_msgs_recv(r.counters.msgs_recv());
}

// A request's progress timeout and total deadline (0: the daemon's default, none).
// Both capped at 1e12 ms (1e9 s): a progress deadline is the last progress plus the timeout,
// and the nanoseconds of a TimePoint hold about 9.2e12 ms.
CallOptions TimeoutsOf(int64_t timeout_ms, int64_t deadline_ms) {
  constexpr int64_t kMaxMs = int64_t{1000000000000};
  CallOptions opts;
  if (timeout_ms > 0) opts.timeout = Millis(std::min(timeout_ms, kMaxMs));
  if (deadline_ms > 0) {
    opts.deadline = Deadline::After(*SteadyClock::Get(), Millis(std::min(deadline_ms, kMaxMs)));
  }
  return opts;
}

void ToProto(const Status& s, proto::StatusProto* p) {
  p->set_code(static_cast<int>(s.code()));
  p->set_message(s.message());
}

// One shared payload region of a client: its staging area (region 0) or a block the program
// allocated (1, 2, ...).
struct Mapping {
  void* data = nullptr;
  size_t bytes = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (data != nullptr) ::munmap(data, bytes);
  }
};

// Maps the first `bytes` of the shared memory behind `fd`, a descriptor the client passed
// (closed here, mapped or not). It must be an ordinary memfd (shmem: on hugetlbfs a punched
// hole can leave a page nobody can fault in) sealed against shrinking, and at least `bytes`
// long: memory the client could truncate would be a SIGBUS here at the next touch. The seal
// is read before the size: the client may still truncate and then seal between the two, and
// only a size read after the seal is one it can no longer go below.
StatusOr<std::unique_ptr<Mapping>> MapFd(int fd, size_t bytes, const std::string& what) {
  std::string wrong;
  struct stat st {};
  struct statfs fs {};
  int seals = -1;
  if (bytes == 0) {
    wrong = "a buffer of 0 bytes";
  } else if (::fstatfs(fd, &fs) != 0 || ::fstat(fd, &st) != 0) {
    wrong = std::string("cannot stat it: ") + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    wrong = "it is not a regular file";
  } else if (fs.f_type != TMPFS_MAGIC) {
    wrong = "it is not ordinary shared memory (a memfd without MFD_HUGETLB)";
  } else if (seals = ::fcntl(fd, F_GET_SEALS), seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    wrong =
        "it is not sealed against shrinking (a memfd with F_SEAL_SHRINK; memory the "
        "client could truncate would crash the daemon)";
  } else if (::fstat(fd, &st) != 0) {
    wrong = std::string("cannot stat it: ") + std::strerror(errno);
  } else if (static_cast<size_t>(st.st_size) < bytes) {
    wrong = "it holds " + std::to_string(st.st_size) + " bytes, fewer than the " +
            std::to_string(bytes) + " announced";
  }
  if (!wrong.empty()) {
    ::close(fd);
    return InvalidArgumentError(what + ": " + wrong);
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) {
    return ResourceExhaustedError("cannot map " + what + " (" + std::to_string(bytes) +
                                  " bytes): " + std::strerror(errno));
  }
  auto mapping = std::make_unique<Mapping>();
  mapping->data = m;
  mapping->bytes = bytes;
  return mapping;
}

// A client's regions. A connection may hold at most kMaxRegions, so a program that leaks
// blocks runs out of them with an error instead of exhausting the daemon's address space.
class Regions {
 public:
  static constexpr size_t kMaxRegions = 4096;

  // Maps the memory behind `fd` (MapFd, which closes it) as region `id`, replacing what it held.
  Status Map(uint32_t id, int fd, size_t bytes) {
    if (regions_.count(id) == 0 && regions_.size() >= kMaxRegions) {
      ::close(fd);
      return ResourceExhaustedError("this client already has " + std::to_string(kMaxRegions) +
                                    " shared buffers mapped; free some with FreeBuffer");
    }
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<Mapping> mapping,
                          MapFd(fd, bytes, "shared buffer " + std::to_string(id)));
    regions_[id] = std::move(mapping);
    Recount();
    return Status::Ok();
  }

  Status Unmap(uint32_t id) {
    if (id == 0 || regions_.erase(id) == 0) {
      return InvalidArgumentError("no shared buffer " + std::to_string(id) + " to unmap");
    }
    Recount();
    return Status::Ok();
  }

  // The address of `n` bytes at `offset` in region `id`: null for nothing to hold, an error
  // naming the region when they do not lie inside it.
  StatusOr<unsigned char*> Locate(uint32_t id, uint64_t offset, uint64_t n,
                                  const char* what) const {
    if (n == 0) return static_cast<unsigned char*>(nullptr);
    auto it = regions_.find(id);
    if (it == regions_.end()) {
      return InvalidArgumentError(std::string("the call's ") + what + " names shared buffer " +
                                  std::to_string(id) + ", which this client has not mapped");
    }
    const Mapping& m = *it->second;
    if (offset > m.bytes || n > m.bytes - offset) {
      return InvalidArgumentError(std::string("the call's ") + what + " (" + std::to_string(n) +
                                  " bytes at offset " + std::to_string(offset) +
                                  ") does not fit shared buffer " + std::to_string(id) + " of " +
                                  std::to_string(m.bytes) + " bytes");
    }
    return static_cast<unsigned char*>(m.data) + offset;
  }

  size_t LargestBytes() const { return largest_; }

 private:
  void Recount() {
    largest_ = 0;
    for (const auto& [id, m] : regions_) largest_ = std::max(largest_, m->bytes);
  }

  std::map<uint32_t, std::unique_ptr<Mapping>> regions_;
  size_t largest_ = 0;  // of the regions' sizes
};

// How long a connection waits for the client's next request without sleeping: a program
// calling collectives in a loop sends it within this.
constexpr Duration kRequestSpin = std::chrono::microseconds(50);

// While a collective runs, a heartbeat every second tells the client this daemon is alive, so
// a client never waits on a stopped or frozen daemon unbounded: a message with id 0 on the
// socket, or, once the client has attached a doorbell, a tick of the doorbell's counter. One thread
// per connection that ticks once a second whether or not a call runs: starting a thread per call,
// or waking one at every call's start, cost tens of microseconds per small collective.
class Heartbeat {
 public:
  Heartbeat(int fd, std::mutex* write_mu, const std::string& what)
      : fd_(fd), write_mu_(write_mu), what_(what) {}
  // Starts the beating thread; ResourceExhausted, naming `who`, when there is none to be had.
  Status Start(const std::string& who) {
    return StartThread(&thread_, who, "the heartbeat of a client connection", [this] { Loop(); });
  }
  ~Heartbeat() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void CallStarted() {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = true;
  }
  // From now on beats tick `bell`'s counter instead of going out on the socket.
  void UseDoorbell(ipc::Doorbell* bell) {
    std::lock_guard<std::mutex> lock(mu_);
    bell_ = bell;
  }
  // Waits for a beat being written, so no beat follows the call's answer on the socket.
  void CallEnded() {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
  }

 private:
  static constexpr Duration kInterval = std::chrono::seconds(1);

  void Loop() {
    proto::ClientResponse beat;
    beat.set_id(0);
    std::unique_lock<std::mutex> lock(mu_);
    TimePoint tick = SteadyClock::Get()->Now() + kInterval;
    while (!cv_.wait_until(lock, tick, [&] { return stopping_; })) {
      tick += kInterval;
      const TimePoint now = SteadyClock::Get()->Now();
      if (tick < now) tick = now + kInterval;  // fell behind (a slow write): no burst
      if (!running_) continue;
      if (bell_ != nullptr) {
        bell_->Beat();
        continue;
      }
      std::lock_guard<std::mutex> wl(*write_mu_);
      ipc::WriteMessage(fd_, beat, Deadline::After(*SteadyClock::Get(), Seconds(5)), what_)
          .IgnoreError();
    }
  }

  const int fd_;
  std::mutex* const write_mu_;
  const std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  bool running_ = false;
  ipc::Doorbell* bell_ = nullptr;
  std::thread thread_;
};

// How long a connection waiting on its doorbell sleeps before it looks at its socket (for the
// client's EOF) and at Stop().
constexpr Duration kDoorbellSlice = std::chrono::milliseconds(100);

}  // namespace

namespace {

// How long a descriptor announced through the doorbell may take to arrive on the socket; the
// client sends it before the request, so only a client that never sends it waits this long.
constexpr Duration kFdArrival = std::chrono::seconds(5);
// How long the rest of a message that has begun to arrive on the socket may take: a client
// sends each one whole, so only a stray or cut-off message waits this long.
constexpr Duration kRestOfMessage = std::chrono::seconds(1);

// Reads one message from the socket of a client with a doorbell, waiting up to `wait`: it
// must be an empty request carrying a descriptor, which `reader` then holds.
Status ReadFdCarrier(ipc::MessageReader& reader, Duration wait) {
  const std::string wrong =
      "the client wrote to its socket after attaching a doorbell (only an empty request "
      "carrying a file descriptor may come there)";
  const size_t held = reader.held_fds();
  proto::ClientRequest carrier;
  const bool begun = reader.buffered() > 0;
  Status s = reader.Read(&carrier, Deadline::After(*SteadyClock::Get(), wait), "client connection");
  if (s.code() == StatusCode::kUnavailable) return s;
  if (s.code() == StatusCode::kDeadlineExceeded) {
    if (begun || reader.buffered() > 0) {
      return InvalidArgumentError(wrong + ": an incomplete message, and nothing more within " +
                                  FormatDuration(wait));
    }
    return DeadlineExceededError("none came on the socket within " + FormatDuration(wait));
  }
  if (!s.ok()) return InvalidArgumentError(wrong + ": " + s.message());
  if (carrier.body_case() != proto::ClientRequest::BODY_NOT_SET || carrier.id() != 0 ||
      reader.held_fds() <= held) {
    return InvalidArgumentError(wrong);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int> ClientServer::RequestFd(ipc::MessageReader& reader, bool via_doorbell) {
  int fd = reader.TakeFd();
  if (fd >= 0 || !via_doorbell) {
    if (fd < 0) return InvalidArgumentError("the request came without its file descriptor");
    return fd;
  }
  Status s = ReadFdCarrier(reader, kFdArrival);
  if (!s.ok()) {
    return Status(s.code(), "the file descriptor announced through the doorbell: " + s.message());
  }
  return reader.TakeFd();
}

Status ClientServer::NextRequest(ipc::Doorbell& bell, int fd, ipc::MessageReader& reader, bool spin,
                                 uint32_t* seq, proto::ClientRequest* req) {
  // bounded: an idle client may compute for hours between calls; its EOF or Stop() ends the
  // wait, each looked at every kDoorbellSlice.
  for (ipc::WaitPolicy w = ipc::DoorbellPolicy(spin, kRequestSpin);
       !bell.WaitRequest(*seq, w, kDoorbellSlice); w = ipc::WaitPolicy{}) {
    if (stopping_) return UnavailableError("the daemon is stopping");
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char c = 0;
    const ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
    if (r <= 0) return UnavailableError("the client closed its connection");
    // A descriptor sent ahead of its MapBuffer request: held for it. Sent whole by then.
    GYRE_RETURN_IF_ERROR(ReadFdCarrier(reader, kRestOfMessage));
  }
  return bell.ReadRequest(req, seq);
}

std::optional<ClientServer::Departure> ClientServer::departure() const {
  std::lock_guard<std::mutex> lock(departure_mu_);
  return departure_;
}

ClientServer::ClientServer(Communicator* comm, std::string job_id, std::string log_prefix)
    : comm_(comm), job_id_(std::move(job_id)), prefix_(std::move(log_prefix)) {}

ClientServer::~ClientServer() {
  Stop();
  // Joined without the lock, which a connection thread takes on its way out.
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    threads.swap(threads_);
  }
  for (auto& t : threads) {
    if (t.joinable()) t.join();
  }
  if (!path_.empty()) ::unlink(path_.c_str());
}

void ClientServer::SetSecret(auth::Secret secret, Duration handshake_timeout) {
  credentials_.secret = std::move(secret);
  handshake_timeout_ = handshake_timeout;
}

Status ClientServer::Authenticate(int fd) {
  auth::Refusal refusal = auth::Refusal::kMalformed;
  Status s = auth::AcceptOnFd(fd, auth::Channel::kClient, credentials_, &replay_guard_,
                              Deadline::After(*SteadyClock::Get(), handshake_timeout_), &refusal);
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    handshaking_.erase(std::remove(handshaking_.begin(), handshaking_.end(), fd),
                       handshaking_.end());
  }
  if (!s.ok()) {
    refusals_.Count(refusal);
    int64_t held_back = 0;
    if (refusal_log_.Allow(SteadyClock::Get()->Now(), &held_back)) {
      LOG(WARNING) << prefix_ << "refused a client connection: " << s.message() << " ["
                   << auth::RefusalName(refusal) << "]" << refusal_log_.HeldBackNote(held_back);
    }
  }
  return s;
}

void ClientServer::ReapFinishedThreads() {
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (std::find(finished_.begin(), finished_.end(), it->get_id()) == finished_.end()) {
      ++it;
      continue;
    }
    it->join();
    it = threads_.erase(it);
  }
  finished_.clear();
}

Status ClientServer::Listen(const std::string& socket_path) {
  GYRE_ASSIGN_OR_RETURN(listen_fd_, ipc::ListenUnix(socket_path));
  path_ = socket_path;
  LOG(INFO) << prefix_ << "serving clients on " << socket_path;
  return Status::Ok();
}

void ClientServer::RequestStop() { stopping_ = true; }

void ClientServer::Stop() {
  stopping_ = true;
  // Wake connection threads blocked reading an idle client.
  std::lock_guard<std::mutex> lock(threads_mu_);
  for (int fd : live_fds_) ::shutdown(fd, SHUT_RDWR);
}

void ClientServer::Serve(bool until_first_client_leaves) {
  one_program_ = until_first_client_leaves;
  while (!stopping_ && !(until_first_client_leaves && client_left_)) {
    pollfd p{listen_fd_, POLLIN, 0};
    int rc = ::poll(&p, 1, 100);
    if (rc <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The connection stays queued and the socket readable: wait for a descriptor to free
        // up instead of spinning on it.
        LOG_EVERY_N(WARNING, 50) << prefix_
                                 << "cannot accept a client connection: " << std::strerror(errno);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      continue;
    }
    std::lock_guard<std::mutex> lock(threads_mu_);
    ReapFinishedThreads();
    if (live_fds_.size() >= kMaxConnections) {
      refusals_.Count(auth::Refusal::kOverCap);
      int64_t held_back = 0;
      if (refusal_log_.Allow(SteadyClock::Get()->Now(), &held_back)) {
        LOG(WARNING) << prefix_ << "refused a client connection: already " << live_fds_.size()
                     << " connections, " << handshaking_.size() << " of them in the handshake ["
                     << auth::RefusalName(auth::Refusal::kOverCap) << "]"
                     << refusal_log_.HeldBackNote(held_back);
      }
      ::close(fd);
      continue;
    }
    // At the handshake cap the connection that has waited longest is cut off, not the
    // newcomer: idle connections held open cannot lock the rank's program out.
    if (handshaking_.size() >= static_cast<size_t>(kMaxUnauthenticated)) {
      refusals_.Count(auth::Refusal::kOverCap);
      LOG(WARNING) << prefix_ << "cut off the client connection longest in the handshake: "
                   << handshaking_.size() << " connections in the handshake (the cap), one more "
                   << "came [" << auth::RefusalName(auth::Refusal::kOverCap) << "]";
      ::shutdown(handshaking_.front(), SHUT_RDWR);  // its thread reads EOF, drops it, closes
      handshaking_.pop_front();
    }
    handshaking_.push_back(fd);
    live_fds_.push_back(fd);
    try {
      threads_.emplace_back([this, fd] { HandleConnection(fd); });
    } catch (const std::system_error& e) {
      // No thread to be had: this connection goes, the daemon (and its program) goes on.
      handshaking_.erase(std::remove(handshaking_.begin(), handshaking_.end(), fd),
                         handshaking_.end());
      live_fds_.erase(std::remove(live_fds_.begin(), live_fds_.end(), fd), live_fds_.end());
      ::close(fd);
      LOG(WARNING) << prefix_ << "cannot start a thread for a client connection (" << e.what()
                   << "); it is closed";
    }
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  // Nobody can connect any more, so the socket file is only a leftover, and gyred leaves with
  // _exit, past the destructor: removed here, or every run left one behind.
  if (!path_.empty()) ::unlink(path_.c_str());
  path_.clear();
  if (stopping_) Stop();  // a RequestStop (a signal): wake the connection threads from here
}

Status ClientServer::AdmitProgram(int64_t pid) {
  const std::string rank = "rank " + std::to_string(comm_->rank());
  // A gyred that serves one program's communicator exits once it is gone: a later one would
  // be cut off as it exits.
  auto exiting = [&] {
    return UnavailableError(rank + "'s gyred served its program's communicator (pid " +
                            std::to_string(served_pid_.load()) +
                            ") and exits once that is closed or gone; a gyred started by "
                            "gyrerun serves one communicator: keep the first one for the "
                            "program's life");
  };
  if (one_program_ && ever_served_ && !serving_) return exiting();
  // A program that just left may not have been seen to go yet (its thread reads the EOF a
  // moment later), and the next one must not be refused for it: wait for that, briefly.
  const Deadline deadline = Deadline::After(*SteadyClock::Get(), Seconds(2));
  while (serving_.exchange(true)) {
    if (deadline.Expired(*SteadyClock::Get()) || stopping_) {
      // One program, one communicator, per rank: a second one's calls would be matched with
      // the other ranks' calls of the first, and both would return data summed across them.
      const int64_t served = served_pid_.load();
      return AlreadyExistsError(
          pid == served
              ? rank + "'s gyred already serves a communicator of this program (pid " +
                    std::to_string(served) + "), and a rank has one"
              : rank + "'s gyred already serves program pid " + std::to_string(served) +
                    ", and a rank has one program with one communicator: pid " +
                    std::to_string(pid) + " is refused (was it given this rank's socket?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (one_program_ && ever_served_) {
    serving_ = false;
    return exiting();
  }
  ever_served_ = true;
  served_pid_ = pid;
  return Status::Ok();
}

void ClientServer::HandleConnection(int fd) {
  Regions regions;
  bool said_hello = false;
  bool refused_hello = false;  // answered, then the connection ends
  int64_t client_pid = 0;
  bool goodbye = false;  // the program closed its communicator
  const std::string what = "client connection";
  const bool authenticated = Authenticate(fd).ok();
  // Once the client attaches one, requests and answers go through this shared block.
  std::unique_ptr<Mapping> bell_block;
  ipc::Doorbell bell;
  uint32_t bell_seq = 0;  // the last request read through it
  // A refused connection gets no heartbeat thread: it is closed without a call.
  std::optional<Heartbeat> beat;
  // Without a heartbeat the client could not tell a long call from a frozen daemon, so a
  // connection whose heartbeat cannot start serves no call: its first request is answered
  // with why, and the program fails with that rather than this daemon aborting.
  Status no_beat;
  if (authenticated) {
    beat.emplace(fd, &write_mu_, what);
    no_beat = beat->Start("rank " + std::to_string(comm_->rank()) + "'s gyred");
    if (!no_beat.ok()) {
      beat.reset();
      LOG(ERROR) << prefix_ << no_beat.message();
    }
  }
  // A bad GYRE_LOCAL_WORLD_SIZE failed gyred at start-up (ResolveIdentity).
  const StatusOr<bool> spin = ipc::SpinWaitPays(comm_->size());
  const bool spin_pays = spin.ok() && *spin;
  ipc::MessageReader reader(fd);  // every read of fd from here on
  while (authenticated && !stopping_) {
    proto::ClientRequest req;
    Status rs;
    if (bell.valid()) {
      rs = NextRequest(bell, fd, reader, spin_pays, &bell_seq, &req);
    } else {
      const bool spin = spin_pays && reader.buffered() == 0;
      if (spin) ipc::SpinForMessage(fd, kRequestSpin);
      // Not spinning, the next request cannot be there yet (this thread has just answered the
      // last one): sleep in poll at once.
      // bounded: an idle client may compute for hours between calls; EOF or Stop() (which shuts
      // the socket down) ends this read.
      rs = reader.Read(&req, Deadline::Infinite(), what,
                       spin ? ipc::ReadStart::kTryFirst : ipc::ReadStart::kWaitFirst);
    }
    if (!rs.ok()) {
      if (rs.code() != StatusCode::kUnavailable) {
        LOG(WARNING) << prefix_ << "dropping a client connection: " << rs.message();
      } else if (said_hello && !goodbye && !stopping_) {
        // Its process ended (or closed the socket) with the communicator still open: the
        // other ranks hear of it from main.cc, so that they name the program, not this daemon.
        const std::string how =
            "its connection to gyred closed without a goodbye (the program was killed, crashed, "
            "or exited without closing its communicator)";
        LOG(WARNING) << prefix_ << "client pid " << client_pid << " went away: " << how;
        std::lock_guard<std::mutex> lock(departure_mu_);
        departure_ = Departure{client_pid, how};
      } else {
        LOG(INFO) << prefix_ << "client disconnected";
      }
      break;
    }
    proto::ClientResponse resp;
    resp.set_id(req.id());
    Status result;
    ipc::Doorbell attached;  // a doorbell this request attaches
    Status admitted = no_beat;
    if (admitted.ok() && req.has_hello() && !said_hello) {
      admitted = AdmitProgram(req.hello().client_pid());
    }
    if (!admitted.ok()) {
      result = admitted;
      LOG(WARNING) << prefix_ << "refused client pid " << req.hello().client_pid() << ": "
                   << result.message();
      refused_hello = true;
    } else if (req.has_hello()) {
      said_hello = true;
      resp.set_rank(comm_->rank());
      resp.set_world_size(comm_->size());
      resp.set_job_id(job_id_);
      LOG(INFO) << prefix_ << "client pid " << req.hello().client_pid() << " connected";
      client_pid = req.hello().client_pid();
      if (on_program_) {
        // The kernel's word for the pid, in this daemon's pid namespace (where /proc is read),
        // over the program's own.
        ucred peer{};
        socklen_t len = sizeof(peer);
        const bool known =
            ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid > 0;
        on_program_(known ? peer.pid : client_pid);
      }
      {
        // A daemon that serves one program after another tells of the last one's departure.
        std::lock_guard<std::mutex> lock(departure_mu_);
        departure_.reset();
      }
    } else if (!said_hello) {
      result = InvalidArgumentError("the first request on a connection must be hello");
    } else if (req.has_goodbye()) {
      goodbye = true;
      if (req.goodbye().closed()) {
        program_closed_ = true;
      } else {
        // It stops calling here while the others may go on: they must hear that it left, or
        // a call of theirs that it never makes reads as this daemon dying.
        std::lock_guard<std::mutex> lock(departure_mu_);
        departure_ = Departure{client_pid, job::kLeftWithoutClose, true};
      }
      LOG(INFO) << prefix_ << "client pid " << client_pid << " closed its communicator"
                << (req.goodbye().closed() ? ""
                                           : " without a Close that met every rank (this "
                                             "rank's records stay in the store)");
    } else if (req.has_map_buffer()) {
      auto mfd = RequestFd(reader, bell.valid());
      result = mfd.ok() ? regions.Map(req.map_buffer().region(), *mfd, req.map_buffer().bytes())
                        : mfd.status();
    } else if (req.has_unmap_buffer()) {
      result = regions.Unmap(req.unmap_buffer().region());
    } else if (req.has_attach_doorbell()) {
      if (bell.valid()) {
        result = InvalidArgumentError("a doorbell is attached already");
      } else {
        auto mfd = RequestFd(reader, false);
        StatusOr<std::unique_ptr<Mapping>> block = mfd.status();
        if (mfd.ok()) block = MapFd(*mfd, req.attach_doorbell().bytes(), "the doorbell block");
        result = block.status();
        if (result.ok()) {
          auto opened = ipc::Doorbell::Open((*block)->data, (*block)->bytes);
          result = opened.status();
          if (result.ok()) {
            bell_block = std::move(*block);
            attached = *opened;
          }
        }
      }
    } else if (req.has_collective()) {
      const proto::CollectiveCall& c = req.collective();
      algo::CollectiveSpec spec;
      spec.collective = static_cast<algo::Collective>(c.collective());
      spec.count = c.count();
      spec.dtype = static_cast<DataType>(c.dtype());
      spec.op = static_cast<ReduceOp>(c.reduce_op());
      spec.root = c.root();
      spec.world_size = comm_->size();
      CallOptions opts = TimeoutsOf(c.timeout_ms(), c.deadline_ms());
      opts.algorithm = static_cast<algo::Algorithm>(c.algorithm());
      opts.deterministic = c.deterministic();
      if (c.has_refused()) {
        // The program's own reason; a code that is not an error (or not one gyre knows) is
        // still a refusal, of the caller's arguments.
        const int code = c.refused().code();
        if (code == 0 && c.refused().message().empty()) {
          result = InvalidArgumentError("a refused call without a reason");
        } else if (code == 0 || !IsKnownStatusCode(code)) {
          result = InvalidArgumentError(c.refused().message() + " (refused with status code " +
                                        std::to_string(code) + ")");
        } else {
          result = Status(static_cast<StatusCode>(code), c.refused().message());
        }
      } else if (c.collective() < 0 || c.collective() >= algo::kNumCollectives ||
                 c.algorithm() < 0 || c.algorithm() >= algo::kNumAlgorithms) {
        result = InvalidArgumentError("unknown collective or algorithm value in request");
      } else if (c.deterministic() < -1 || c.deterministic() > 1) {
        // As Options::deterministic is refused in the library, for a client that is not it.
        result = InvalidArgumentError("deterministic is " + std::to_string(c.deterministic()) +
                                      " in request: want -1 (the job's default), 0 (off) or 1 "
                                      "(canonical order)");
      } else {
        result = algo::ValidateSpec(spec);
      }
      // Every call with elements has a buffer of at least `count` of them, so a count no
      // region can hold is refused before the size arithmetic below could overflow.
      if (result.ok() && spec.count > 0 &&
          static_cast<uint64_t>(spec.count) > regions.LargestBytes() / DataTypeSize(spec.dtype)) {
        result = InvalidArgumentError("count " + std::to_string(spec.count) +
                                      " does not fit any mapped shared memory (the largest holds " +
                                      std::to_string(regions.LargestBytes()) + " bytes)");
      }
      const void* in = nullptr;
      void* out = nullptr;
      if (result.ok()) {
        // Bounded by the guard above: at most world size x the largest region, far below
        // 2^64 for the daemon's own (trusted) world size.
        const uint64_t es = DataTypeSize(spec.dtype);
        const uint64_t in_bytes = static_cast<uint64_t>(algo::InputCount(spec, comm_->rank())) * es;
        const uint64_t out_bytes =
            static_cast<uint64_t>(algo::OutputCount(spec, comm_->rank())) * es;
        // Locate refuses bytes that do not lie inside the region they name.
        auto ip = regions.Locate(c.input_region(), c.input_offset(), in_bytes, "input");
        auto op = regions.Locate(c.output_region(), c.output_offset(), out_bytes, "output");
        if (!ip.ok()) {
          result = ip.status();
        } else if (!op.ok()) {
          result = op.status();
        } else {
          in = *ip;
          out = *op;
        }
      }
      if (result.ok()) {
        // Beating from before the lock, so that no wait for it can pass for a frozen daemon.
        // (One program is served at a time (AdmitProgram), so the lock only guards the
        // Communicator.)
        beat->CallStarted();
        std::lock_guard<std::mutex> lock(call_mu_);
        result = comm_->Run(spec, in, out, opts);
        beat->CallEnded();
        Report(comm_->last(), &resp);
        ++calls_;
        if (!result.ok()) LOG(ERROR) << prefix_ << result.ToString();
      } else {
        // Refused before it ran, here or by the program: it still takes its place in the
        // sequence, as in an embedded rank, so the next call meets the others' next call.
        std::lock_guard<std::mutex> lock(call_mu_);
        result = comm_->Refuse(spec, result);
        Report(comm_->last(), &resp);
        ++calls_;
        LOG(WARNING) << prefix_ << result.ToString();
      }
    } else if (req.has_message()) {
      const proto::PointToPointCall& m = req.message();
      const CallOptions opts = TimeoutsOf(m.timeout_ms(), m.deadline_ms());
      const DataType dtype = static_cast<DataType>(m.dtype());
      void* buf = nullptr;
      if (!IsValidDataType(m.dtype())) {
        result = InvalidArgumentError("unknown dtype value " + std::to_string(m.dtype()) +
                                      " in a send/recv request");
      } else if (m.count() < 0 || static_cast<uint64_t>(m.count()) >
                                      std::numeric_limits<uint64_t>::max() / DataTypeSize(dtype)) {
        result = InvalidArgumentError("send/recv of " + std::to_string(m.count()) +
                                      " elements: not a valid count");
      } else {
        auto located =
            regions.Locate(m.region(), m.offset(),
                           static_cast<uint64_t>(m.count()) * DataTypeSize(dtype), "buffer");
        if (!located.ok()) {
          result = located.status();
        } else {
          buf = *located;
        }
      }
      if (result.ok()) {
        beat->CallStarted();  // before the lock, as above
        std::lock_guard<std::mutex> lock(call_mu_);
        result = m.send() ? comm_->Send(buf, m.count(), dtype, m.peer(), m.tag(), opts)
                          : comm_->Recv(buf, m.count(), dtype, m.peer(), m.tag(), opts);
        beat->CallEnded();
        Report(comm_->last(), &resp);
        ++calls_;
        if (!result.ok()) LOG(ERROR) << prefix_ << result.ToString();
      }
    } else {
      result = InvalidArgumentError("empty request");
    }
    ToProto(result, resp.mutable_status());
    Status ws;
    if (bell.valid()) {
      // An answer that cannot fit the slot can only be a long error: cut its message short.
      if (resp.ByteSizeLong() > ipc::Doorbell::kMaxMessage) {
        resp.mutable_status()->mutable_message()->resize(ipc::Doorbell::kMaxMessage / 2);
        resp.mutable_status()->mutable_message()->append(" [cut short]");
      }
      ws = bell.PostAnswer(resp, bell_seq);
    } else {
      std::lock_guard<std::mutex> wl(write_mu_);
      ws = ipc::WriteMessage(fd, resp, Deadline::After(*SteadyClock::Get(), Seconds(30)), what);
    }
    // The attach is answered on the socket; the next request comes through the doorbell.
    if (ws.ok() && attached.valid()) {
      bell = attached;
      beat->UseDoorbell(&bell);
    }
    if (!ws.ok()) {
      LOG(WARNING) << prefix_ << "cannot answer the client: " << ws.message();
      break;
    }
    if (refused_hello) break;
  }
  if (said_hello && on_program_) on_program_(0);
  {
    std::lock_guard<std::mutex> lock(threads_mu_);
    live_fds_.erase(std::remove(live_fds_.begin(), live_fds_.end(), fd), live_fds_.end());
    // Once listed, the thread may be joined; it only closes and returns from here on.
    finished_.push_back(std::this_thread::get_id());
  }
  ::close(fd);
  if (said_hello) {
    client_left_ = true;
    serving_ = false;  // the next program may come (a gyred that serves one after another)
  }
}

}  // namespace gyre::daemon
