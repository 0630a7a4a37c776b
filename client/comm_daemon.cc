// The daemon Comm: each call is a request to this rank's gyred, written into a shared doorbell
// block (core/ipc/doorbell.h) once the Unix socket has carried the handshake and the attach;
// payloads sit in shared memory (sealed memfds, CreateShared) that this process creates, maps
// and passes to the daemon over the socket, so no tensor byte crosses it. A buffer from
// AllocBuffer is such memory and is used in place; any other buffer is copied through a
// staging area (region 0).
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <vector>

#include "client/comm_impl.h"
#include "core/auth/fd_handshake.h"
#include "core/base/large_memory.h"
#include "core/ipc/doorbell.h"
#include "core/ipc/ipc.h"
#include "proto/client.pb.h"

namespace gyre::client {
namespace {

constexpr int kProtocolVersion = 1;

Status FromProto(const proto::StatusProto& s) {
  if (s.code() == 0) return Status::Ok();
  if (!IsKnownStatusCode(s.code())) {
    return InternalError("gyred answered with unknown status code " + std::to_string(s.code()) +
                         ": " + s.message());
  }
  return Status(static_cast<StatusCode>(s.code()), s.message());
}

size_t Align(size_t v) { return (v + 63) & ~size_t{63}; }

// How long a call waits for the daemon's answer without sleeping; small collectives answer
// within it, and a longer one costs this much CPU once.
constexpr Duration kAnswerSpin = std::chrono::microseconds(50);

// The daemons whose communicator this process has had and let go: a gyred started by gyrerun
// serves its program's one communicator and exits once it is closed or gone, so a second
// one made here finds no daemon, and is told so at once rather than after the wait for a
// daemon still starting.
std::mutex g_served_mu;
std::set<std::string>* g_served = new std::set<std::string>();  // leaked: used at exit

void RememberServed(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_served_mu);
  g_served->insert(path);
}

bool WasServed(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_served_mu);
  return g_served->count(path) > 0;
}

class DaemonComm final : public CommBase {
 public:
  DaemonComm(int fd, std::string path) : fd_(fd), reader_(fd), path_(std::move(path)) {}
  ~DaemonComm() override {
    StopCalls();
    SayGoodbye(false);
    if (served_) RememberServed(path_);
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    if (bell_mem_ != nullptr) ::munmap(bell_mem_, ipc::Doorbell::kBlockBytes);
    for (const auto& [start, block] : blocks_) {
      ::munmap(reinterpret_cast<void*>(start), block.bytes);
    }
    if (fd_ >= 0) ::close(fd_);
  }

  StatusOr<void*> AllocBuffer(size_t bytes) override {
    if (bytes > static_cast<size_t>(algo::kMaxCallBytes)) {
      return ResourceExhaustedError("AllocBuffer: " + std::to_string(bytes) +
                                    " bytes pass the 2^60 bytes one call may span");
    }
    void* block = nullptr;
    GYRE_RETURN_IF_ERROR(Inline([&]() -> Status {
      const uint32_t region = next_region_++;
      GYRE_ASSIGN_OR_RETURN(void* data, MapShared(std::max<size_t>(bytes, 1), region));
      blocks_[reinterpret_cast<uintptr_t>(data)] =
          Block{PageRound(std::max<size_t>(bytes, 1)), region, bytes};
      block = data;
      return Status::Ok();
    }));
    return block;
  }

  Status FreeBuffer(void* block) override {
    return Inline([&]() -> Status {
      auto it = blocks_.find(reinterpret_cast<uintptr_t>(block));
      if (it == blocks_.end()) {
        return InvalidArgumentError(
            "FreeBuffer: the pointer is not a block from AllocBuffer of "
            "this Comm (or was freed already)");
      }
      const Block b = it->second;
      blocks_.erase(it);
      ::munmap(block, b.bytes);
      proto::ClientRequest req;
      req.set_id(++next_id_);
      req.mutable_unmap_buffer()->set_region(b.region);
      return Ask(req);
    });
  }

  Status Hello(Deadline deadline) {
    proto::ClientRequest req;
    req.set_id(++next_id_);
    req.mutable_hello()->set_protocol_version(kProtocolVersion);
    req.mutable_hello()->set_client_pid(::getpid());
    proto::ClientResponse resp;
    GYRE_RETURN_IF_ERROR(SocketRoundTrip(req, &resp, deadline));
    served_ = true;
    rank_ = resp.rank();
    size_ = resp.world_size();
    GYRE_ASSIGN_OR_RETURN(spin_, ipc::SpinWaitPays(size_));
    return Status::Ok();
  }

  // Moves requests and answers from the socket to a shared doorbell block (core/ipc/doorbell.h).
  Status AttachDoorbell(Deadline deadline) {
    int mfd = -1;
    GYRE_ASSIGN_OR_RETURN(void* m, CreateShared(ipc::Doorbell::kBlockBytes, &mfd));
    bell_mem_ = m;
    const ipc::Doorbell bell = ipc::Doorbell::Create(m);
    proto::ClientRequest req;
    req.set_id(++next_id_);
    req.mutable_attach_doorbell()->set_bytes(ipc::Doorbell::kBlockBytes);
    proto::ClientResponse resp;
    Status s = SocketRoundTrip(req, &resp, deadline, mfd);
    ::close(mfd);
    GYRE_RETURN_IF_ERROR(s);
    bell_ = bell;
    return Status::Ok();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string mode() const override { return "daemon"; }
  // The daemon answered a request on the socket (a refusal included): it was there to talk.
  bool answered() const { return answered_; }

 protected:
  Status Refused(const algo::CollectiveSpec& spec, const Status& why) override {
    return Refuse(spec, why);
  }
  Status Call(algo::CollectiveSpec spec, const void* in, void* out, const Options& o) override {
    // Before anything is staged: a request given up on may still run over the staging area.
    if (!broken_.ok()) return broken_;
    spec.world_size = size_;
    const StatusOr<CallOptions> options = ToCallOptions(o);
    if (!options.ok()) return Refuse(spec, options.status());
    const CallOptions& co = *options;
    if (Status valid = algo::ValidateSpec(spec); !valid.ok()) return Refuse(spec, valid);
    const size_t es = DataTypeSize(spec.dtype);
    // Bounded by ValidateSpec: at most kMaxCallBytes.
    const size_t in_bytes = static_cast<size_t>(algo::InputCount(spec, rank_)) * es;
    const size_t out_bytes = static_cast<size_t>(algo::OutputCount(spec, rank_)) * es;
    if (in_bytes > 0 && in == nullptr) {
      return Refuse(spec, InvalidArgumentError("the input buffer is null but must hold " +
                                               std::to_string(in_bytes) + " bytes"));
    }
    if (out_bytes > 0 && out == nullptr) {
      return Refuse(spec, InvalidArgumentError("the output buffer is null but must hold " +
                                               std::to_string(out_bytes) + " bytes"));
    }
    if (Status apart = algo::CheckBufferOverlap(spec, rank_, in, out); !apart.ok()) {
      return Refuse(spec, apart);
    }
    // A buffer inside a block from AllocBuffer is used where it is; any other is staged.
    StatusOr<std::optional<Place>> in_where = std::optional<Place>();
    if (in_bytes > 0) in_where = InBlock(in, in_bytes, "input");
    if (!in_where.ok()) return Refuse(spec, in_where.status());
    StatusOr<std::optional<Place>> out_where = std::optional<Place>();
    if (out_bytes > 0) out_where = InBlock(out, out_bytes, "output");
    if (!out_where.ok()) return Refuse(spec, out_where.status());
    const std::optional<Place> in_block = *in_where;
    const std::optional<Place> out_block = *out_where;
    const bool stage_in = in_bytes > 0 && !in_block;
    const bool stage_out = out_bytes > 0 && !out_block;
    // In place (allreduce, or broadcast at the root): one staged area serves as both, so the
    // staging file holds the buffer once, not twice.
    const bool in_place = stage_in && stage_out && in == out && in_bytes == out_bytes &&
                          (spec.collective == algo::Collective::kAllreduce ||
                           (spec.collective == algo::Collective::kBroadcast && spec.root == rank_));
    const size_t out_offset = in_place || !stage_in ? 0 : Align(in_bytes);
    if (stage_in || stage_out) {
      Status mapped = EnsureMapped(stage_out ? out_offset + out_bytes : in_bytes);
      if (!mapped.ok()) return Refuse(spec, mapped);
    }
    if (stage_in) std::memcpy(map_, in, in_bytes);

    proto::ClientRequest req;
    req.set_id(++next_id_);
    proto::CollectiveCall* c = req.mutable_collective();
    c->set_collective(static_cast<int>(spec.collective));
    c->set_algorithm(static_cast<int>(co.algorithm));
    c->set_count(spec.count);
    c->set_dtype(static_cast<int>(spec.dtype));
    c->set_reduce_op(static_cast<int>(spec.op));
    c->set_root(spec.root);
    c->set_deterministic(co.deterministic);
    c->set_timeout_ms(TimeoutMs(co));
    c->set_deadline_ms(DeadlineMs(co));
    c->set_input_region(in_block ? in_block->region : 0);
    c->set_input_offset(in_block ? in_block->offset : 0);
    c->set_output_region(out_block ? out_block->region : 0);
    c->set_output_offset(out_block ? out_block->offset : out_offset);
    c->set_has_input(in_bytes > 0);
    c->set_has_output(out_bytes > 0);
    proto::ClientResponse resp;
    GYRE_RETURN_IF_ERROR(RingDaemon(req, &resp));
    Status st = FromProto(resp.status());
    const bool copy_out = st.ok() && stage_out;
    if (copy_out) std::memcpy(out, static_cast<unsigned char*>(map_) + out_offset, out_bytes);
    Answered(resp, static_cast<int64_t>((stage_in ? in_bytes : 0) + (copy_out ? out_bytes : 0)));
    return st;
  }

  // A call refused here, before any buffer went to the daemon, still takes its place in the
  // daemon's sequence, as a refusal does in an embedded rank: else this rank's next call
  // would meet the other ranks' refused one and could pass with their data. The answer
  // names the call's seq and this rank.
  Status Refuse(const algo::CollectiveSpec& spec, const Status& why) {
    proto::ClientRequest req;
    req.set_id(++next_id_);
    proto::CollectiveCall* c = req.mutable_collective();
    c->set_collective(static_cast<int>(spec.collective));
    c->set_count(spec.count);
    c->set_dtype(static_cast<int>(spec.dtype));
    c->set_reduce_op(static_cast<int>(spec.op));
    c->set_root(spec.root);
    c->mutable_refused()->set_code(static_cast<int>(why.code()));
    c->mutable_refused()->set_message(why.message());
    proto::ClientResponse resp;
    if (!RingDaemon(req, &resp).ok()) return why;  // the channel's failure is kept in broken_
    Answered(resp, 0);
    return FromProto(resp.status());
  }

  // Through the daemon a message runs in call order, like a collective.
  std::shared_ptr<Work> StartMessage(bool send, void* buf, int64_t count, DataType dtype, int peer,
                                     int tag, const Options& o) override {
    return Queued([=] { return CallMessage(send, buf, count, dtype, peer, tag, o); });
  }

 private:
  static int64_t TimeoutMs(const CallOptions& co) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(co.timeout).count();
  }
  // 0: no total deadline; else what is left of it, at least 1 ms.
  static int64_t DeadlineMs(const CallOptions& co) {
    if (co.deadline.infinite()) return 0;
    return std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(
                                    co.deadline.Remaining(*SteadyClock::Get()))
                                    .count());
  }

  // Where a buffer lies in a block from AllocBuffer.
  struct Place {
    uint32_t region;
    uint64_t offset;
  };
  struct Block {
    size_t bytes;  // mapped: whole pages
    uint32_t region;
    size_t asked;  // what AllocBuffer was asked for
  };

  static size_t PageRound(size_t v) { return (v + 4095) & ~size_t{4095}; }

  // Where a buffer lies in a block from AllocBuffer: nullopt when in none (it is staged); an
  // error when it starts in one but runs past what was asked for, as the call would read or
  // write memory the program does not own (staged, it crashed the program later). A buffer
  // that runs on into the blocks that follow its block in memory is the program's memory all
  // through: the daemon maps each block on its own, so it is staged, like any other.
  StatusOr<std::optional<Place>> InBlock(const void* p, size_t n, const char* what) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = blocks_.upper_bound(a);
    if (it == blocks_.begin()) return std::optional<Place>();
    --it;
    const uintptr_t off = a - it->first;
    if (off >= it->second.bytes) return std::optional<Place>();
    const size_t asked = std::max<size_t>(it->second.asked, 1);
    if (off >= asked || n > asked - off) {
      if (off < it->second.asked && SpansAdjacentBlocks(it, a + n)) return std::optional<Place>();
      return InvalidArgumentError(std::string("the ") + what + " buffer (" + std::to_string(n) +
                                  " bytes at offset " + std::to_string(off) +
                                  ") runs past the end of its AllocBuffer block of " +
                                  std::to_string(it->second.asked) + " bytes");
    }
    return std::optional<Place>(Place{it->second.region, off});
  }

  // Whether the blocks from `first` on cover every byte up to `end` that is past `first`'s
  // start, each starting where the one before ends and none with a byte between the end of
  // what AllocBuffer was asked for and the next block (a block of a size that is not whole
  // pages is never followed directly: blocks are mapped at page boundaries).
  bool SpansAdjacentBlocks(std::map<uintptr_t, Block>::const_iterator first, uintptr_t end) const {
    for (auto it = first; it != blocks_.end();) {
      const uintptr_t asked_end = it->first + it->second.asked;
      if (end <= asked_end) return true;
      if (it->second.asked == 0) return false;
      auto next = std::next(it);
      if (next == blocks_.end() || next->first != asked_end) return false;
      it = next;
    }
    return false;
  }

  // Records what the daemon says the call did, and the bytes this side staged.
  void Answered(const proto::ClientResponse& resp, int64_t staged) {
    CallInfo info;
    info.algorithm = algo::AlgorithmName(static_cast<algo::Algorithm>(resp.algorithm()));
    info.seq = resp.seq();
    info.elapsed = Duration(resp.elapsed_ns());
    info.bytes_sent = resp.bytes_sent();
    info.msgs_sent = resp.msgs_sent();
    info.bytes_recv = resp.bytes_recv();
    info.msgs_recv = resp.msgs_recv();
    info.bytes_staged = staged;
    SetLast(info);
  }

  Status CallMessage(bool send, void* buf, int64_t count, DataType dtype, int peer, int tag,
                     const Options& o) {
    if (!broken_.ok()) return broken_;  // before anything is staged, as in Call
    GYRE_ASSIGN_OR_RETURN(CallOptions co, ToCallOptions(o));
    const std::string what = std::string(send ? "send to rank " : "recv from rank ") +
                             std::to_string(peer) + " (tag " + std::to_string(tag) + ")";
    if (!IsValidDataType(static_cast<int>(dtype))) {
      return InvalidArgumentError(what + ": unknown dtype");
    }
    if (count < 0) return InvalidArgumentError(what + ": the count is negative");
    if (count > algo::kMaxCallBytes / static_cast<int64_t>(DataTypeSize(dtype))) {
      return InvalidArgumentError(what + ": " + std::to_string(count) +
                                  " elements pass the 2^60 bytes one call may span");
    }
    const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
    if (bytes > 0 && buf == nullptr) {
      return InvalidArgumentError(what + ": the buffer is null but must hold " +
                                  std::to_string(count) + " elements");
    }
    std::optional<Place> block;
    if (bytes > 0) {
      GYRE_ASSIGN_OR_RETURN(block, InBlock(buf, bytes, "message"));
    }
    const bool staged = bytes > 0 && !block;
    if (staged) GYRE_RETURN_IF_ERROR(EnsureMapped(bytes));
    if (staged && send) std::memcpy(map_, buf, bytes);
    proto::ClientRequest req;
    req.set_id(++next_id_);
    proto::PointToPointCall* m = req.mutable_message();
    m->set_send(send);
    m->set_peer(peer);
    m->set_tag(tag);
    m->set_count(count);
    m->set_dtype(static_cast<int>(dtype));
    m->set_timeout_ms(TimeoutMs(co));
    m->set_deadline_ms(DeadlineMs(co));
    m->set_region(block ? block->region : 0);
    m->set_offset(block ? block->offset : 0);
    proto::ClientResponse resp;
    GYRE_RETURN_IF_ERROR(RingDaemon(req, &resp));
    Status st = FromProto(resp.status());
    const bool copy_out = st.ok() && staged && !send;
    if (copy_out) std::memcpy(buf, map_, bytes);
    Answered(resp, staged && (send || copy_out) ? static_cast<int64_t>(bytes) : 0);
    return st;
  }

  // A request before the doorbell is attached (hello, the attach itself), on the socket.
  // `pass`, when not -1, is a descriptor that goes with the request.
  Status SocketRoundTrip(const proto::ClientRequest& req, proto::ClientResponse* resp,
                         Deadline deadline, int pass = -1) {
    const std::string what = "gyre client talking to daemon at " + path_;
    GYRE_RETURN_IF_ERROR(pass >= 0 ? ipc::WriteMessageWithFd(fd_, req, pass, deadline, what)
                                   : ipc::WriteMessage(fd_, req, deadline, what));
    GYRE_RETURN_IF_ERROR(reader_.Read(resp, deadline, what));
    answered_ = true;
    if (resp->id() != req.id()) {
      return InternalError(what + ": reply " + std::to_string(resp->id()) + " to request " +
                           std::to_string(req.id()));
    }
    return FromProto(resp->status());
  }

  // A request that is not a call (map or unmap a buffer): its answer's status is the result.
  Status Ask(const proto::ClientRequest& req) {
    proto::ClientResponse resp;
    GYRE_RETURN_IF_ERROR(RingDaemon(req, &resp));
    return FromProto(resp.status());
  }

  static constexpr Duration kDaemonSilence = std::chrono::seconds(10);

  // Tells the daemon that the program closes its communicator on purpose (Close, or the
  // destructor): a connection that closes without it reads as a program killed or crashed,
  // and the daemon tells the other ranks so (daemon/client_server.cc). Once; waits a second at
  // most for the answer.
  void Closing(bool met) override { SayGoodbye(met); }
  void SayGoodbye(bool closed) {
    if (said_goodbye_ || !broken_.ok() || !bell_.valid()) return;
    said_goodbye_ = true;
    proto::ClientRequest req;
    req.set_id(++next_id_);
    req.mutable_goodbye()->set_closed(closed);
    uint32_t seq = 0;
    if (!bell_.PostRequest(req, &seq).ok()) return;
    proto::ClientResponse resp;
    AwaitAnswer(req, seq, &resp, Deadline::After(*SteadyClock::Get(), Seconds(1))).IgnoreError();
  }

  // One request and its answer through the doorbell. The daemon bounds a call by its own
  // progress and total deadlines and always answers; between sleeps this looks at the socket,
  // whose EOF means the daemon died, and at the daemon's heartbeat counter, which ticks every
  // second while a call runs: kDaemonSilence without a tick means the daemon is stopped or
  // frozen, and the call fails rather than waiting on it.
  // After a failure of the channel itself (the daemon gone, silent, or answering out of turn)
  // the request may still run in the daemon later, over the staging area a next call would
  // fill: every later call fails at once with that first failure instead.
  Status RingDaemon(const proto::ClientRequest& req, proto::ClientResponse* resp) {
    if (!broken_.ok()) return broken_;
    uint32_t seq = 0;
    GYRE_RETURN_IF_ERROR(bell_.PostRequest(req, &seq));  // refused before it was posted: no harm
    Status s = AwaitAnswer(req, seq, resp);
    if (!s.ok()) {
      broken_ = Status(s.code(), "an earlier call through the daemon at " + path_ + " failed (" +
                                     s.ToString() +
                                     "); no further call is sent on this Comm: make a new one");
    }
    return s;
  }

  // `give_up`: a bound of the caller's own, besides the daemon's silence.
  Status AwaitAnswer(const proto::ClientRequest& req, uint32_t seq, proto::ClientResponse* resp,
                     // bounded: without give_up, by the daemon's heartbeat (kDaemonSilence)
                     Deadline give_up = Deadline::Infinite()) {
    const Clock& clock = *SteadyClock::Get();
    ipc::WaitPolicy policy = ipc::DoorbellPolicy(spin_, kAnswerSpin);
    uint64_t beat = bell_.heartbeat();
    TimePoint heard = TimePoint{};
    TimePoint last_turn = TimePoint{};
    for (; !bell_.WaitAnswer(seq, policy, kBellSlice); policy = ipc::WaitPolicy{}) {
      const TimePoint now = clock.Now();
      // Turns come a slice apart; a gap of seconds means this process did not run (Ctrl-Z of
      // the job: the daemon was stopped too, and has not beaten again yet). The daemon's
      // silence is counted from the resumption, not from before the stop.
      if (last_turn != TimePoint{} && now - last_turn >= kBellSlice + kPausedAtLeast) {
        heard += now - last_turn;
      }
      last_turn = now;
      if (heard == TimePoint{} || bell_.heartbeat() != beat) {
        heard = now;
        beat = bell_.heartbeat();
      }
      if (DaemonHungUp()) {
        return UnavailableError("gyre client talking to daemon at " + path_ +
                                ": connection closed by the other side (the daemon exited)");
      }
      if (give_up.Expired(clock)) {
        return DeadlineExceededError("the daemon at " + path_ + " did not answer in time");
      }
      if (now - heard >= kDaemonSilence) {
        return DeadlineExceededError("the daemon at " + path_ + " sent nothing for " +
                                     FormatDuration(kDaemonSilence) +
                                     " during a call (no heartbeat): it is stopped or frozen");
      }
    }
    GYRE_RETURN_IF_ERROR(bell_.ReadAnswer(resp));
    if (resp->id() != req.id()) {
      return InternalError("gyre client talking to daemon at " + path_ + ": reply " +
                           std::to_string(resp->id()) + " to request " + std::to_string(req.id()));
    }
    return Status::Ok();
  }

  Status broken_;
  bool said_goodbye_ = false;  // by Close or the destructor, once
  bool served_ = false;        // the daemon took this communicator (its hello was answered)
  bool answered_ = false;      // the daemon answered at least one request on the socket

  // Whether the daemon closed the socket: once the doorbell is attached it writes nothing
  // there, so anything readable is its EOF.
  bool DaemonHungUp() const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  // How long a wait on the doorbell sleeps before it looks at the daemon's liveness.
  static constexpr Duration kBellSlice = std::chrono::milliseconds(100);
  // A wait on the doorbell that came back this much later than its slice was not running.
  static constexpr Duration kPausedAtLeast = std::chrono::seconds(1);

  // Grows the staging area (region 0) to at least `bytes`, doubling, at least 1 MiB.
  Status EnsureMapped(size_t bytes) {
    if (bytes <= map_bytes_ && map_ != nullptr) return Status::Ok();
    size_t want = std::max<size_t>(Align(bytes), 1 << 20);
    if (map_bytes_ > 0) want = std::max(want, map_bytes_ * 2);
    GYRE_ASSIGN_OR_RETURN(void* m, MapShared(want, 0));
    if (map_ != nullptr) ::munmap(map_, map_bytes_);
    map_ = m;
    map_bytes_ = want;
    return Status::Ok();
  }

  // New shared memory of `bytes` (rounded up to pages), mapped here and by the daemon as
  // region `region`.
  StatusOr<void*> MapShared(size_t bytes, uint32_t region) {
    // A broken channel takes nothing more: a descriptor passed now would sit in the daemon,
    // holding its memory, with no request ever to take it.
    if (!broken_.ok()) return broken_;
    const size_t want = PageRound(bytes);
    int mfd = -1;
    GYRE_ASSIGN_OR_RETURN(void* m, CreateShared(want, &mfd));
    proto::ClientRequest req;
    req.set_id(++next_id_);
    req.mutable_map_buffer()->set_bytes(want);
    req.mutable_map_buffer()->set_region(region);
    // The descriptor goes ahead on the socket, on an empty request; the daemon takes it for
    // this request when it reads it from the doorbell.
    Status s = ipc::WriteMessageWithFd(fd_, proto::ClientRequest(), mfd,
                                       Deadline::After(*SteadyClock::Get(), kDaemonSilence),
                                       "gyre client talking to daemon at " + path_);
    ::close(mfd);
    if (!s.ok()) {
      broken_ = Status(s.code(), "passing shared memory to the daemon at " + path_ + " failed (" +
                                     s.ToString() +
                                     "); no further call is sent on this Comm: make a new one");
    } else {
      s = Ask(req);
    }
    if (!s.ok()) {
      ::munmap(m, want);
      return s;
    }
    return m;
  }

  // New shared memory of `want` bytes (whole pages): a memfd, mapped here, whose descriptor
  // *fd the caller passes to the daemon and then closes. Nothing of it is left on any file
  // system, whoever dies first. It is sealed against shrinking (F_SEAL_SHRINK) before the
  // daemon sees it, and the daemon maps nothing else: memory the program could truncate
  // would be a SIGBUS in the daemon at its next touch, whatever the program meant. Its pages
  // are reserved now, so memory that runs out is this error rather than a SIGBUS at the first
  // touch; more than the host (or this process's memory cgroup) has available is refused
  // before the reservation, which would otherwise end in the OOM killer.
  StatusOr<void*> CreateShared(size_t want, int* fd) {
    GYRE_RETURN_IF_ERROR(CheckAvailableMemory(want, "cannot reserve shared memory for the daemon"));
    const int mfd = ::memfd_create("gyre-buffer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (mfd < 0) {
      return ResourceExhaustedError(std::string("cannot create shared memory (memfd_create): ") +
                                    std::strerror(errno));
    }
    auto fail = [&](const std::string& what, int err) -> Status {
      ::close(mfd);
      return ResourceExhaustedError(
          "cannot " + what + " " + std::to_string(want) +
          " bytes of shared memory for the daemon: " + std::strerror(err));
    };
    if (::ftruncate(mfd, static_cast<off_t>(want)) != 0) return fail("size", errno);
    const int reserved = ::posix_fallocate(mfd, 0, static_cast<off_t>(want));
    if (reserved != 0) return fail("reserve", reserved);
    if (::fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
      return fail("seal", errno);
    }
    void* m = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (m == MAP_FAILED) return fail("map", errno);
    *fd = mfd;
    return m;
  }

  int fd_;
  ipc::MessageReader reader_;  // the answers to hello and attach, after the handshake
  std::string path_;
  int rank_ = 0;
  int size_ = 1;
  bool spin_ = false;  // wait for answers spinning (ipc::SpinWaitPays)
  uint64_t next_id_ = 0;
  void* map_ = nullptr;  // the staging area, region 0
  size_t map_bytes_ = 0;
  std::map<uintptr_t, Block> blocks_;  // from AllocBuffer, by start address
  uint32_t next_region_ = 1;
  void* bell_mem_ = nullptr;  // the doorbell block, once created
  ipc::Doorbell bell_;        // valid once the daemon attached it
};

}  // namespace

StatusOr<std::unique_ptr<Comm>> MakeDaemonClient(const std::string& socket_path,
                                                 Deadline deadline) {
  // A daemon that serves one program after another is there at once; one that served this
  // program will not come back. It may be caught in its exit: still listening, or accepting,
  // then closing without a word. Whatever breaks then is said as what it is.
  // The daemon reads nothing from a program that has not proved the job's secret.
  GYRE_ASSIGN_OR_RETURN(auth::Secret secret, auth::SecretFromEnvironment());
  const bool served_before = WasServed(socket_path);
  auto gone = [&](const Status& raw) {
    return UnavailableError(
        "the daemon at " + socket_path +
        " served an earlier communicator of this program and is gone or exiting (" + raw.message() +
        "): a gyred started by gyrerun serves one communicator and exits when it is closed "
        "or destroyed; keep the first one for the program's life");
  };
  if (served_before) {
    StatusOr<int> again =
        ipc::ConnectUnix(socket_path, Deadline::After(*SteadyClock::Get(), Millis(500)));
    if (!again.ok()) return gone(again.status());
    ::close(*again);
  }
  StatusOr<int> fd = ipc::ConnectUnix(socket_path, deadline);
  if (!fd.ok()) return served_before ? gone(fd.status()) : fd.status();
  auto comm = std::make_unique<DaemonComm>(*fd, socket_path);
  Status greeted = [&]() -> Status {
    auth::Credentials me;
    me.secret = std::move(secret);
    if (const char* job = std::getenv("GYRE_JOB_ID")) me.job_id = job;
    GYRE_RETURN_IF_ERROR(
        auth::ConnectOnFd(*fd, auth::Channel::kClient, me, auth::kNoRank, deadline,
                          "gyre client connecting to the daemon at " + socket_path));
    GYRE_RETURN_IF_ERROR(comm->Hello(deadline));
    return comm->AttachDoorbell(deadline);
  }();
  if (!greeted.ok()) {
    // A daemon's own refusal explains itself; a connection cut in its exit does not.
    if (served_before && !comm->answered()) return gone(greeted);
    return greeted;
  }
  return std::unique_ptr<Comm>(std::move(comm));
}

}  // namespace gyre::client
