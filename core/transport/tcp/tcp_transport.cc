#include "core/transport/tcp/tcp_transport.h"

#include <fcntl.h>
#include <glog/logging.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio.hpp>
#include <atomic>
#include <cstring>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "core/auth/handshake_queue.h"
#include "core/base/large_memory.h"
#include "core/base/log_budget.h"
#include "core/base/thread.h"
#include "core/transport/tcp/buffer_pool.h"
#include "core/transport/tcp/frame.h"
#include "core/transport/tcp/socket_options.h"
#include "proto/peer.pb.h"

namespace gyre {
namespace {

using asio::ip::tcp;

constexpr uint32_t kMaxHandshakeMetaBytes = auth::kMaxHandshakeMessageBytes;
// Data frames carry no metadata yet; a little is accepted (and skipped) so a later version
// can add some without breaking this one.
constexpr uint32_t kMaxDataMetaBytes = 64 << 10;
// Reads of a large payload are split so BytesReceivedFrom moves while the frame streams in.
constexpr size_t kReadChunkBytes = 4 << 20;
// Reads smaller than this go through a per-connection stage of this size (InConn::stage):
// one recv takes a frame's header, its payload and whatever follows, where reading straight
// into each would cost a syscall per piece plus one that finds the socket empty. A syscall
// costs about 2 us on a virtual machine; copying a few KiB out of the stage costs less.
constexpr size_t kStageBytes = 16 << 10;
// Bytes one socket may move per io turn before yielding, so a busy peer cannot starve the
// other sockets or a waiting CancelOperation.
constexpr size_t kIoTurnBytes = 16 << 20;
// A driver reads at most this much of an early message (one whose receive is not posted)
// per turn before it looks at its other sockets, and none once something completed: the
// bytes are for a later step or operation, while a message the caller waits for may sit on
// another socket. At 8 ranks on 2 cores a rank still in the timing barrier read the next
// allgather's 8-32 MiB messages from its early peers before the barrier's last 0-byte
// message, and left the barrier 60-130 ms after the others.
constexpr size_t kEarlyTurnBytes = 1 << 20;
// The largest write on a connection that carries messages both ways (PumpWrites).
constexpr size_t kSharedWriteBytes = size_t{256} << 10;
constexpr size_t kDiscardBufferBytes = 256 << 10;
// Charged per buffered message on top of its payload, so floods of empty messages are capped.
constexpr size_t kBufferedMessageOverhead = 64;
constexpr size_t kMaxRememberedCancels = 4096;
constexpr size_t kMaxGatherBuffers = 64;
// A driver spins (TcpTransportOptions::driver_spin) only while it waits for messages of at
// most this size; beyond it the transfer time dwarfs a wake-up.
constexpr size_t kSpinMaxBytes = 256 << 10;
// A driver on a shared core whose sched_yield took longer than this gave the core to a task
// that used a time slice (the scheduler's slices are milliseconds; a peer rank's poll or
// reduce of a small message is microseconds). It then sleeps at once for a while (Drive).
constexpr auto kYieldTooLate = std::chrono::microseconds(1000);
// A spinning driver polls the connections no step waits on once per this many turns
// (Drive): at 8 ranks a zero-timeout poll of 6 idle sockets was one syscall per turn.
constexpr uint32_t kIdlePollTurns = 8;
// ExpectSend leaves the congestion control as it is for operations that send less.
constexpr size_t kCongestionBlindBytes = 64 << 10;
constexpr Duration kYieldRefusalMin = std::chrono::milliseconds(5);
constexpr Duration kYieldRefusalMax = std::chrono::seconds(1);
constexpr int kListenBacklog = 128;
// The epoll datum of the wake-up eventfd; a connection's is its peer's rank.
constexpr uint64_t kWakeEvent = ~uint64_t{0};
// At most this many readiness events are taken per epoll_wait; the rest stay ready.
constexpr size_t kMaxEpollEvents = 64;
constexpr std::chrono::milliseconds kInitialBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{500};
// How long a higher rank's first send waits for the lower rank's connection (see OutState)
// before it connects itself: the lower rank connects when SetPeers is called, and ranks
// call it within milliseconds of each other, unless one is dead or stopped, in which case
// connecting finds out (and its error names the rank).
constexpr std::chrono::milliseconds kAwaitPeerConnection{1000};
constexpr std::chrono::milliseconds kAcceptRetryDelay{100};
// A `done` callback must not block; if the io thread is unresponsive this long something did.
constexpr std::chrono::seconds kIoStallLimit{60};

using MessageKey = std::pair<uint64_t, uint64_t>;  // (seq, tag)

// The earliest entry under `key` in a multimap (find may return any of them).
template <typename Map>
auto First(Map& map, const MessageKey& key) {
  auto it = map.lower_bound(key);
  return it != map.end() && it->first == key ? it : map.end();
}

struct HostPort {
  std::string host;
  std::string port;
};

StatusOr<HostPort> ParseHostPort(const std::string& address) {
  size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return InvalidArgumentError("\"" + address + "\" is not host:port");
  }
  HostPort hp{address.substr(0, colon), address.substr(colon + 1)};
  if (hp.host.size() >= 2 && hp.host.front() == '[' && hp.host.back() == ']') {
    hp.host = hp.host.substr(1, hp.host.size() - 2);
  }
  if (hp.port.size() > 5 ||
      !std::all_of(hp.port.begin(), hp.port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoi(hp.port) == 0 || std::stoi(hp.port) > 65535) {
    return InvalidArgumentError("\"" + address + "\" has no valid port");
  }
  return hp;
}

std::string FormatEndpoint(const tcp::endpoint& ep) {
  std::string host = ep.address().to_string();
  if (ep.address().is_v6()) host = "[" + host + "]";
  return host + ":" + std::to_string(ep.port());
}

// The congestion control for connections to ranks on this host (TcpTransportOptions):
// `own_cpus` when this host has a CPU for each of its ranks.
const std::string& SameHostControl(const TcpTransportOptions& options, bool own_cpus) {
  return own_cpus ? options.same_host_congestion_control : options.shared_cpu_congestion_control;
}

// On a connected socket. `own_cpus`: this host has a CPU for each of its ranks (see
// TcpTransportOptions::same_host_congestion_control). Each end's choice governs what it
// sends; OnConnected and Adopt set it once SetPeers has told whether this host is shared.
// A socket that started with the same-host control (set before its handshake) but whose peer
// is on another host gets `system_cc` back.
void SetSocketOptions(tcp::socket& socket, const TcpTransportOptions& options, bool own_cpus,
                      const std::string& system_cc) {
  asio::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  if (options.socket_buffer_bytes > 0) {
    socket.set_option(asio::socket_base::send_buffer_size(options.socket_buffer_bytes), ignored);
    socket.set_option(asio::socket_base::receive_buffer_size(options.socket_buffer_bytes), ignored);
  }
  const bool same_host = PeerOnThisHost(socket.native_handle());
  const std::string& cc = same_host ? SameHostControl(options, own_cpus) : system_cc;
  if (!cc.empty()) {
    Status set = SetCongestionControl(socket.native_handle(), cc);
    // The connection works either way, only slower for large messages: the first of every
    // thousand such warnings is enough.
    LOG_IF_EVERY_N(WARNING, !set.ok(), 1000)
        << "rank " << options.rank << ": " << set.ToString() << "; keeping the system default";
  }
}

bool WouldBlock(const asio::error_code& ec) {
  return ec == asio::error::would_block || ec == asio::error::try_again;
}

auth::Credentials MakeCredentials(const TcpTransportOptions& options) {
  auth::Credentials c;
  c.secret = options.secret;
  c.job_id = options.job_id;
  c.rank = options.rank;
  c.world_size = options.world_size;
  return c;
}

}  // namespace

class TcpTransport::Impl {
 public:
  explicit Impl(const TcpTransportOptions& options);
  ~Impl();

  Status Start();
  const std::string& address() const { return address_; }
  Status SetPeers(std::vector<std::string> addresses);
  int rank() const { return options_.rank; }
  int size() const { return options_.world_size; }
  const Clock& clock() const { return *clock_; }
  void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
            DoneCallback done);
  void Recv(int peer, const MessageHeader& header, void* data, size_t bytes, DoneCallback done);
  void CancelOperation(uint64_t seq, const Status& reason);
  std::optional<StaleMessage> TakeStale(uint64_t seq);
  uint64_t BytesReceivedFrom(int peer) const;
  uint64_t BytesSentTo(int peer) const;
  uint64_t BytesReceivedFrom(int peer, uint64_t seq) const {
    return SeqBytesOf(received_by_seq_.get(), peer, seq);
  }
  uint64_t BytesSentTo(int peer, uint64_t seq) const {
    return SeqBytesOf(sent_by_seq_.get(), peer, seq);
  }
  std::string DescribePeer(int peer) const;
  void Shutdown();
  const auth::RefusalCounters& refusals() const { return refusals_; }
  BufferPoolStats early_buffers() const {
    std::lock_guard<std::mutex> lock(mu_);
    return early_pool_.stats();
  }
  std::optional<Exhaustion> LastExhaustion() const {
    std::lock_guard<std::mutex> lock(mu_);
    return exhausted_;
  }

 private:
  struct Completion {
    DoneCallback done;
    Status status;
  };

  struct PendingRecv {
    MessageHeader header;
    uint8_t* data = nullptr;
    size_t bytes = 0;
    DoneCallback done;
  };

  // A message that arrived before its Recv was posted.
  struct BufferedMessage {
    OpDesc desc;
    PooledBuffer payload;
    size_t bytes = 0;
    size_t charge = 0;  // what it counts against max_unexpected_bytes
  };

  // The accepted connection from a peer, once that peer has been identified.
  struct InConn;
  struct RecvPeer {
    // Equal keys keep their order (a multimap inserts at the end of their range; First
    // finds the earliest). One node per message: a map of queues cost three allocations.
    std::multimap<MessageKey, PendingRecv> posted;
    std::multimap<MessageKey, BufferedMessage> unexpected;
    std::shared_ptr<InConn> conn;
    Status closed;  // not OK once the peer's connection to this rank is gone
  };

  enum class ReadPhase { kHeader, kMeta, kPayload };
  enum class Sink { kUser, kBuffer, kDiscard };  // where the current payload goes

  struct InConn {
    InConn(tcp::socket s, asio::io_context& io) : socket(std::move(s)), handshake_timer(io) {}
    tcp::socket socket;
    asio::steady_timer handshake_timer;
    std::string remote;  // the peer's ephemeral address, for logs before it is identified
    int peer = -1;
    bool handshake_done = false;
    std::unique_ptr<auth::Acceptor> acceptor;  // until the handshake is done
    bool rejecting = false;                    // a refusal is being written; nothing more is read
    bool closed = false;
    // Identified and handed to drivers: the socket is released from the io thread's reactor
    // (so data arriving does not wake that thread) and read through `parked_fd`.
    bool parked = false;
    int parked_fd = -1;
    tcp protocol = tcp::v4();
    bool reply_in_flight = false;  // the hello ack is being written: the socket stays asio's
    bool unpark_posted = false;
    // The connection also carries this rank's messages to the peer (out_conns_[peer] writes
    // to a duplicate of the descriptor); closing one side closes the other.
    bool shared = false;
    // In the drivers' epoll set (Drive) as `epoll_watched` of `epoll_set`, until Close. It
    // must leave the set before its descriptor closes: with a duplicate still open (`shared`)
    // the kernel would keep reporting the closed one.
    int epoll_set = -1;
    int epoll_watched = -1;
    // The kernel refused it a place in the set (epoll_ctl failed: out of memory, or over
    // max_user_watches): it is polled with the rest, and not offered again on every turn.
    bool epoll_refused = false;
    int fd() { return parked ? parked_fd : socket.native_handle(); }
    void Unwatch() {
      if (epoll_set >= 0) ::epoll_ctl(epoll_set, EPOLL_CTL_DEL, epoll_watched, nullptr);
      epoll_set = -1;
      epoll_watched = -1;
    }
    void Close() {
      asio::error_code ignored;
      Unwatch();
      if (parked_fd >= 0) ::close(parked_fd);
      parked_fd = -1;
      // asio's close leaves the descriptor in epoll to the kernel, which drops it only when
      // the last duplicate closes: a shared socket is taken out of the reactor first.
      if (shared && socket.is_open()) {
        const int fd = socket.release(ignored);
        if (!ignored && fd >= 0) ::close(fd);
      }
      socket.close(ignored);
    }
    ~InConn() {
      Unwatch();
      if (parked_fd >= 0) ::close(parked_fd);
    }
    ReadPhase phase = ReadPhase::kHeader;
    std::array<uint8_t, kFrameHeaderBytes> header_bytes{};
    size_t header_got = 0;
    FrameHeader frame;
    std::vector<uint8_t> meta;
    size_t meta_got = 0;
    uint64_t payload_got = 0;
    Sink sink = Sink::kDiscard;
    PendingRecv recv;     // sink == kUser
    PooledBuffer buffer;  // sink == kBuffer
    size_t buffer_charge = 0;
    // Bytes read from the socket but not yet consumed (ReadSome); allocated at the first
    // staged read. Used only once the handshake is done, so nothing is read ahead of a proof.
    std::unique_ptr<uint8_t[]> stage;
    size_t stage_begin = 0;
    size_t stage_end = 0;
    bool Staged() const { return stage_begin < stage_end; }
    std::vector<uint8_t> challenge;  // the challenge frame being written
    std::vector<uint8_t> reply;      // the ack frame being written
  };

  struct SendOp {
    uint64_t seq = 0;
    std::array<uint8_t, kFrameHeaderBytes> header{};
    const uint8_t* data = nullptr;
    size_t bytes = 0;
    size_t sent = 0;  // header and payload bytes written so far
    // After a cancel in mid-write the rest of the payload lives here, so the frame can be
    // finished (the stream stays framed) without touching the caller's buffer.
    LargeBytes owned;
    size_t owned_from = 0;
    DoneCallback done;  // empty once the op has been completed by a cancel

    const uint8_t* PayloadAt(size_t offset) const {
      return owned ? owned.get() + (offset - owned_from) : data + offset;
    }
  };

  // With one_connection_per_pair the lower rank of each pair connects, as soon as SetPeers
  // is called, and the higher rank sends on that connection:
  // kAwaiting: a higher rank's sends queue for up to kAwaitPeerConnection while the lower
  //   rank's connection is on its way; then it connects itself.
  // kAdopting: the peer's connection to this rank will carry this rank's messages once the
  //   hello ack is written (OnAuthenticated); sends queue until then.
  enum class OutState { kIdle, kAwaiting, kConnecting, kAdopting, kReady, kFailed };

  struct OutConn {
    OutConn(asio::io_context& io, int peer_rank)
        : peer(peer_rank), socket(io), timer(io), resolver(io) {}
    int peer;
    OutState state = OutState::kIdle;
    tcp::socket socket;
    asio::steady_timer timer;  // attempt deadline, then retry backoff
    tcp::resolver resolver;
    std::deque<SendOp> queue;
    bool write_waiting = false;  // the io thread waits for room, or is about to write
    bool driver_write = false;   // the socket was full during a lease: the driver waits for room
    Status failure;
    HostPort target;
    TimePoint started{};
    Deadline deadline = Deadline::Infinite();
    int attempts = 0;
    Duration backoff{};
    std::string last_error;
    // The last connect that ended was refused (nothing listens there), not made.
    bool last_refused = false;
    // Since when every attempt has been refused (the start of the latest run of refusals);
    // none while the last attempt was not.
    std::optional<TimePoint> refused_since;
    uint64_t attempt = 0;    // handlers of an older attempt see a different value and return
    uint64_t proof_out = 0;  // the attempt whose proof was sent: it waits for the answer
    std::unique_ptr<auth::Connector> connector;  // during the handshake
    std::vector<uint8_t> hello;                  // then the proof: the frame being written
    std::array<uint8_t, kFrameHeaderBytes> ack_header{};
    std::vector<uint8_t> ack_meta;
    std::array<uint8_t, 64> probe{};
    // Shared with an InConn (the one connection to the peer, both ways). Its descriptor is
    // then kept out of the io thread's reactor (`raw_fd`, socket closed) except while the io
    // thread waits for room: registered, every message arriving on the connection would wake
    // that thread for nothing.
    bool shared = false;
    int raw_fd = -1;
    tcp protocol = tcp::v4();
    int fd() { return raw_fd >= 0 ? raw_fd : socket.native_handle(); }
    bool same_host = false;  // the peer is on this host (ExpectSend may switch its CC)
    bool bulk_cc = false;    // runs options.bulk_congestion_control now
    ~OutConn() {
      if (raw_fd >= 0) ::close(raw_fd);
    }
  };

  // Wraps an io handler: it runs holding mu_, and callbacks produced while it ran are
  // delivered when it is done, without the lock, never while the state is half updated.
  template <typename F>
  auto Wrap(F f) {
    return [this, f = std::move(f)](auto&&... args) mutable {
      std::unique_lock<std::mutex> lock(mu_);
      f(std::forward<decltype(args)>(args)...);
      UnlockAndDeliver(lock);
    };
  }
  // Posts make() to the io thread unless it has shut down; make() is only called (and so
  // only consumes what it captures) when the post happens.
  template <typename MakeHandler>
  bool PostIfOpen(MakeHandler&& make) {
    std::lock_guard<std::mutex> lock(post_mu_);
    if (io_closed_) return false;
    asio::post(io_, Wrap(make()));
    return true;
  }
  bool OnIoThread() { return io_.get_executor().running_in_this_thread(); }
  bool OnDriverThread() const {
    return driver_active_ && driver_thread_ == std::this_thread::get_id();
  }
  void WaitForIo(std::future<void>& done, const char* what);
  void Complete(DoneCallback done, Status status);
  // Releases `lock` (on mu_) and runs the callbacks collected meanwhile.
  void UnlockAndDeliver(std::unique_lock<std::mutex>& lock);
  Status ShutdownStatus() const;

 public:
  // DrivenTransport (core/transport/driven.h).
  bool AcquireDriver(size_t max_message_bytes);
  void ReleaseDriver();
  void Drive(TimePoint until);
  // Drive's helpers. Wanted: a receive is posted on the peer's connection, or a frame is
  // half read. Watch: adds the connection to the epoll set (once); false if it cannot.
  // ReadIfIdle: reads the connection an epoll event names (its peer's rank), if it is still
  // that peer's, watched and not wanted (the wanted are read at the top of each turn), and
  // adds it to poll_in_. ReadReadyIdle: ReadIfIdle for each connection the epoll set has
  // ready now (it does not wait).
  static bool Wanted(const RecvPeer& p);
  bool Watch(InConn* c);
  void ReadIfIdle(uint64_t event);
  void ReadReadyIdle();
  void Wake();
  void ExpectSend(size_t bytes);

 private:
  // Whether every receive this rank waits for is at most kSpinMaxBytes (driver only).
  bool WaitingForLittle() const;
  // Everything below runs holding mu_: on the io thread, on the driver thread, or on a
  // caller's thread inside Send/Recv/CancelOperation. Asio objects are only touched under
  // mu_, so no two threads use one at once, and new waits, connects and handshakes are only
  // started on the io thread (other threads post them there).
  void SendOnIo(int peer, const MessageHeader& header, const uint8_t* data, size_t bytes,
                DoneCallback done);
  void RecvOnIo(int peer, const MessageHeader& header, uint8_t* data, size_t bytes,
                DoneCallback done);
  void CancelOnIo(uint64_t seq, const Status& reason);
  void ShutdownOnIo();
  const Status* FindCancel(uint64_t seq) const;
  Status CheckMatch(int peer, const FrameHeader& frame, const PendingRecv& recv) const;

  void StartAccept();
  void OnAccepted(tcp::socket socket);
  void WaitReadable(const std::shared_ptr<InConn>& c);
  // Reads until the socket has nothing more. From the io thread (`driven` false) it then arms
  // a wait, or parks the connection if a driver holds the lease; the driver polls instead.
  void OnReadable(const std::shared_ptr<InConn>& c, bool driven = false);
  // recv(MSG_DONTWAIT) into [data, data + size), through c.stage for small reads.
  ssize_t ReadSome(InConn& c, uint8_t* data, size_t size);
  // Gives a parked connection back to the io thread.
  void Unpark(const std::shared_ptr<InConn>& c);
  // Takes an identified connection away from the io thread's reactor (io thread only).
  void Park(const std::shared_ptr<InConn>& c);
  void OnHeader(const std::shared_ptr<InConn>& c);
  void OnHandshakeFrame(const std::shared_ptr<InConn>& c);
  void OnAuthenticated(const std::shared_ptr<InConn>& c);
  void StartPayload(const std::shared_ptr<InConn>& c);
  void FinishPayload(const std::shared_ptr<InConn>& c);
  // Closes a connection that has not authenticated, without telling it why.
  void RefuseStranger(const std::shared_ptr<InConn>& c, auth::Refusal refusal,
                      const std::string& why);
  // `code`: ResourceExhausted when this rank's own memory is why (an early message's buffer
  // could not be allocated, for operation `seq`), so that its receives from that peer fail
  // with it, and its state (LastExhaustion) and the verdict name this rank, not the sender.
  void Drop(const std::shared_ptr<InConn>& c, const std::string& why,
            StatusCode code = StatusCode::kUnavailable, uint64_t seq = 0);
  void CloseIn(const std::shared_ptr<InConn>& c, const Status& reason);
  // Writes a goodbye naming `reason` on a connection about to be dropped, so the peer's
  // failed writes and reads say why (best effort: only between frames of what this rank
  // writes there, and only if the socket takes it whole at once).
  void SayGoodbye(const std::shared_ptr<InConn>& c, const std::string& reason);
  // A goodbye frame read off a connection: closes it with the peer's reason.
  void OnGoodbye(const std::shared_ptr<InConn>& c);
  std::string DescribeIn(const InConn& c) const;

  void StartConnect(const std::shared_ptr<OutConn>& o);
  void StartAttempt(const std::shared_ptr<OutConn>& o);
  void ConnectTo(const std::shared_ptr<OutConn>& o, uint64_t id,
                 std::vector<tcp::endpoint> endpoints, size_t i, asio::error_code last);
  void SetListenerControl();
  void OnConnected(const std::shared_ptr<OutConn>& o, uint64_t id);
  // Reads one handshake frame of type `expected` into ack_meta, then calls OnChallenge or
  // OnAck.
  void ReadHandshakeFrame(const std::shared_ptr<OutConn>& o, uint64_t id, FrameType expected);
  void OnHandshakeHeader(const std::shared_ptr<OutConn>& o, uint64_t id, FrameType expected);
  void OnChallenge(const std::shared_ptr<OutConn>& o, uint64_t id);
  void OnAck(const std::shared_ptr<OutConn>& o, uint64_t id);
  // `refused`: the attempt's connect was refused (nothing listened at the address).
  void AttemptFailed(const std::shared_ptr<OutConn>& o, uint64_t id, const std::string& error,
                     bool refused = false);
  void WatchForClose(const std::shared_ptr<OutConn>& o);
  // One connection per peer pair, both ways (see OnAuthenticated): the acceptor writes on a
  // duplicate of the accepted socket, the connector reads a duplicate of its own.
  void Adopt(const std::shared_ptr<InConn>& c, const std::shared_ptr<OutConn>& o);
  // A higher rank's first send to a lower one: waits for that rank's connection.
  void AwaitPeerConnection(const std::shared_ptr<OutConn>& o);
  // An idle OutConn with sends queued: connects, once SetPeers has given the address.
  void ConnectQueued(const std::shared_ptr<OutConn>& o);
  void ReadReplies(const std::shared_ptr<OutConn>& o);
  // Takes a shared connection's descriptor out of the reactor (o->raw_fd).
  Status Unregister(const std::shared_ptr<OutConn>& o);
  // A receive from `peer` is posted or being filled.
  bool AwaitingFrom(int peer) const {
    const RecvPeer& p = recv_peers_[peer];
    return !p.posted.empty() ||
           (p.conn && p.conn->phase == ReadPhase::kPayload && p.conn->sink == Sink::kUser);
  }
  // write_some of gather_, on the socket or the raw descriptor.
  size_t WriteGathered(OutConn& o, asio::error_code& ec);
  void PumpWrites(const std::shared_ptr<OutConn>& o);
  // The socket is full: waits for room on the io thread, or leaves it to the driver.
  void ArmWritable(const std::shared_ptr<OutConn>& o);
  void WaitWritable(const std::shared_ptr<OutConn>& o);
  void FailOut(const std::shared_ptr<OutConn>& o, const Status& status);
  // The peer's reason for dropping `o`'s connection, when its goodbye is the next thing to
  // read there: on a connection this rank only writes, or on a shared one whose reader is
  // between frames (what that reader staged comes first). Only peeks.
  std::optional<std::string> GoodbyeOn(const std::shared_ptr<OutConn>& o);
  // A write on `o` failed with `ec`: fails it with the peer's goodbye if it sent one (and, on
  // a shared connection, the receives from the peer too), else with the write's error.
  void WriteFailed(const std::shared_ptr<OutConn>& o, const asio::error_code& ec);
  // Nothing more will come from this peer: its posted receives and any later ones fail with
  // `reason`.
  void CloseReceives(RecvPeer* p, const Status& reason);

  const TcpTransportOptions options_;
  const auth::Credentials credentials_;
  const Clock* const clock_;
  std::string address_;  // fixed by Start(), before the io thread exists
  std::unique_ptr<std::atomic<uint64_t>[]> bytes_received_;
  std::unique_ptr<std::atomic<uint64_t>[]> bytes_sent_;  // headers included
  // The same by operation (BytesReceivedFrom(peer, seq)): for each peer, the bytes of the
  // last kSeqSlots operations whose frames moved, the oldest slot taken over by a new one.
  // Written under mu_ (by the io thread or the driver), read from any thread. An operation
  // whose slot was taken reads 0 until its frames move again, so a flood of other messages
  // gives a wait in it at most one false sign of progress.
  struct SeqBytes {
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> bytes{0};
  };
  static constexpr int kSeqSlots = 4;
  static uint64_t SeqBytesOf(const SeqBytes* table, int peer, uint64_t seq);
  void CountSeqBytes(SeqBytes* table, std::vector<uint8_t>* next, int peer, uint64_t seq,
                     uint64_t n);
  std::unique_ptr<SeqBytes[]> received_by_seq_;
  std::unique_ptr<SeqBytes[]> sent_by_seq_;
  std::vector<uint8_t> received_slot_next_, sent_slot_next_;  // under mu_

  mutable std::mutex peers_mu_;
  bool peers_set_ = false;                   // guarded by peers_mu_
  std::vector<std::string> peer_addresses_;  // guarded by peers_mu_
  std::vector<HostPort> peer_targets_;       // guarded by peers_mu_

  std::mutex post_mu_;
  bool io_closed_ = false;  // guarded by post_mu_; no handler is posted once set

  std::mutex shutdown_mu_;
  bool joined_ = true;  // guarded by shutdown_mu_; false while the io thread may run

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_guard_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_timer_;

  // The transport's state below, whichever thread moves the bytes.
  mutable std::mutex mu_;
  bool shutdown_ = false;
  std::optional<Exhaustion> exhausted_;  // the latest drop for want of memory
  bool driver_active_ = false;
  std::thread::id driver_thread_;
  int wake_fd_ = -1;  // an eventfd a Drive polls, so other threads can end its wait
  // Drive's sleep in large worlds: wake_fd_ and every identified connection a driver has
  // looked at, each added once (Watch), so the kernel's work per wait no longer grows with
  // the world. A poll of every connection per wait was 35% of the CPU at 64 ranks on 2
  // cores (sock_poll, tcp_poll, fdget, ppoll).
  int epoll_fd_ = -1;
  std::vector<epoll_event> epoll_events_;
  // Whether Drive sleeps on epoll_fd_ (TcpTransportOptions::driver_epoll_above_ranks).
  const bool use_epoll_ = options_.world_size > options_.driver_epoll_above_ranks;
  std::vector<pollfd> poll_fds_;
  // More ranks on this host than it has CPUs (ranks sharing this rank's address host, known
  // from SetPeers; the whole world until then). Decides how a driver waits (Drive).
  std::atomic<bool> oversubscribed_{static_cast<unsigned>(options_.world_size) >
                                    std::thread::hardware_concurrency()};
  // ExpectSend: whether the last operation was bulk; a connection became ready since (it
  // starts with the same-host control).
  std::atomic<bool> bulk_now_{false};
  std::atomic<bool> cc_unsettled_{false};
  // The system's congestion control, read from the listening socket before it is changed
  // (SetListenerControl): what connections to other hosts run, and what same-host ones run
  // between bulk operations when shared_cpu_congestion_control is empty.
  std::string default_cc_;
  // Until then a driver on a shared core sleeps at once instead of yielding between polls:
  // a yield lately handed the core to something that kept it (see Drive). late_yields_
  // counts the late ones since a wait last yielded in time, and sets how long.
  TimePoint yield_refused_until_{};
  int late_yields_ = 0;
  std::vector<std::shared_ptr<InConn>> poll_in_;
  std::vector<std::shared_ptr<InConn>> idle_in_;  // Drive: connections nothing waits on
  // Connects to every higher rank at SetPeers (see OutState). Not in worlds larger than a
  // rank's cap on connections in the handshake, which so many at once would exceed; there
  // the first sender connects and the peer still sends back on that connection if it had
  // none of its own.
  const bool connect_up_ = options_.one_connection_per_pair &&
                           options_.world_size <= options_.max_unauthenticated_connections;
  std::vector<pollfd> idle_fds_;
  // Drive: the index in poll_in_ of the connection of each poll_fds_[1 + k].
  std::vector<size_t> poll_conns_;
  std::vector<Completion> completions_;
  std::vector<RecvPeer> recv_peers_;
  std::set<std::shared_ptr<InConn>> in_conns_;
  // The accepted connections still in the handshake, oldest first.
  auth::HandshakeQueue<std::shared_ptr<InConn>> handshaking_;
  auth::ReplayGuard replay_guard_;
  auth::RefusalCounters refusals_;
  // Refusals of strangers are logged at most this often: anyone who can reach the port can
  // cause one, and should not be able to grow the log without bound.
  LogBudget refusal_log_{20, Seconds(60)};
  size_t unexpected_bytes_ = 0;
  BufferPool early_pool_;  // payload buffers of early messages (buffer_pool.h)
  std::map<uint64_t, Status> cancelled_;
  std::vector<std::shared_ptr<OutConn>> out_conns_;
  std::vector<asio::const_buffer> gather_;
  std::unique_ptr<uint8_t[]> discard_;

  std::promise<void> io_exited_;
  std::future<void> io_exited_future_;
  std::thread io_thread_;
};

TcpTransport::Impl::Impl(const TcpTransportOptions& options)
    : options_(options),
      credentials_(MakeCredentials(options)),
      clock_(SteadyClock::Get()),
      bytes_received_(new std::atomic<uint64_t>[options.world_size]()),
      bytes_sent_(new std::atomic<uint64_t>[options.world_size]()),
      received_by_seq_(new SeqBytes[static_cast<size_t>(options.world_size) * kSeqSlots]),
      sent_by_seq_(new SeqBytes[static_cast<size_t>(options.world_size) * kSeqSlots]),
      received_slot_next_(static_cast<size_t>(options.world_size)),
      sent_slot_next_(static_cast<size_t>(options.world_size)),
      work_guard_(asio::make_work_guard(io_)),
      acceptor_(io_),
      accept_retry_timer_(io_),
      recv_peers_(options.world_size),
      early_pool_(options.early_buffer_pool_bytes),
      discard_(new uint8_t[kDiscardBufferBytes]) {
  for (int q = 0; q < options_.world_size; ++q) {
    out_conns_.push_back(std::make_shared<OutConn>(io_, q));
  }
  gather_.reserve(kMaxGatherBuffers);
}

TcpTransport::Impl::~Impl() {
  CHECK(!OnIoThread()) << "a TcpTransport must not be destroyed inside its own callback";
  Shutdown();
  for (const RecvPeer& p : recv_peers_) {
    if (p.conn) p.conn->Unwatch();
  }
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

Status TcpTransport::Impl::Start() {
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) {
    return ResourceExhaustedError("rank " + std::to_string(options_.rank) +
                                  " cannot create an eventfd: " + std::strerror(errno));
  }
  epoll_events_.resize(kMaxEpollEvents);
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event wake{};
  wake.events = EPOLLIN;
  wake.data.u64 = kWakeEvent;
  if (epoll_fd_ < 0 || ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) != 0) {
    return ResourceExhaustedError("rank " + std::to_string(options_.rank) +
                                  " cannot create its epoll set: " + std::strerror(errno));
  }
  asio::error_code ec;
  asio::ip::address host = asio::ip::make_address(options_.listen_host, ec);
  if (ec) {
    return InvalidArgumentError("listen_host \"" + options_.listen_host +
                                "\" is not an IP address: " + ec.message());
  }
  tcp::endpoint endpoint(host, static_cast<uint16_t>(options_.listen_port));
  std::string where = FormatEndpoint(endpoint);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && options_.socket_buffer_bytes > 0) {
    // Set before listen so accepted sockets inherit it and the window scale is negotiated.
    acceptor_.set_option(asio::socket_base::receive_buffer_size(options_.socket_buffer_bytes), ec);
  }
  if (!ec) {
    StatusOr<std::string> cc = CongestionControl(acceptor_.native_handle());
    if (cc.ok()) default_cc_ = *cc;
    SetListenerControl();
  }
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(kListenBacklog, ec);
  if (ec) {
    return UnavailableError("rank " + std::to_string(options_.rank) + " cannot listen on " + where +
                            ": " + ec.message());
  }
  address_ = FormatEndpoint(acceptor_.local_endpoint(ec));
  if (ec) return UnavailableError("cannot read the listening address: " + ec.message());
  LOG_IF(WARNING, host.is_unspecified())
      << "rank " << options_.rank << " listens for peers on every interface (" << address_
      << ") because listen_host is " << options_.listen_host;
  LOG_IF(WARNING, options_.secret.empty())
      << "rank " << options_.rank << " of job " << options_.job_id
      << " has no job secret: any process that can reach " << address_
      << " and knows the job id can join as a rank";

  StartAccept();
  io_exited_future_ = io_exited_.get_future();
  {
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    joined_ = false;
  }
  Status started = StartThread(&io_thread_, "rank " + std::to_string(options_.rank),
                               "the transport's network I/O", [this] {
                                 io_.run();
                                 io_exited_.set_value();
                               });
  if (!started.ok()) {
    // No io thread ran: Shutdown (from the destructor) has nothing to wait for.
    std::lock_guard<std::mutex> lock(shutdown_mu_);
    joined_ = true;
  }
  return started;
}

// A socket's congestion control must be chosen before its handshake: set afterwards, a
// control that paces (BBR, a common default) leaves its pacing switched on, and every later
// control of the connection is paced from an RTT that a rank waiting for its core stretches
// to milliseconds. So accepted sockets inherit the same-host control from the listener and
// outgoing ones get it before connect (ConnectTo); a connection to another host gets the
// system's back (SetSocketOptions).
void TcpTransport::Impl::SetListenerControl() {
  const std::string& cc = SameHostControl(options_, !oversubscribed_);
  if (cc.empty() || !acceptor_.is_open()) return;
  Status set = SetCongestionControl(acceptor_.native_handle(), cc);
  LOG_IF(WARNING, !set.ok()) << "rank " << options_.rank << ": " << set.ToString()
                             << "; connections start with the system default";
}

Status TcpTransport::Impl::SetPeers(std::vector<std::string> addresses) {
  if (addresses.size() != static_cast<size_t>(options_.world_size)) {
    return InvalidArgumentError("SetPeers got " + std::to_string(addresses.size()) +
                                " addresses for a world of " + std::to_string(options_.world_size) +
                                " ranks");
  }
  std::vector<HostPort> targets;
  for (size_t q = 0; q < addresses.size(); ++q) {
    StatusOr<HostPort> hp = ParseHostPort(addresses[q]);
    if (!hp.ok()) return hp.status().WithContext("address of rank " + std::to_string(q));
    targets.push_back(*hp);
  }
  std::unique_lock<std::mutex> lock(peers_mu_);
  if (peers_set_) {
    return InvalidArgumentError("SetPeers was already called on rank " +
                                std::to_string(options_.rank));
  }
  int local_ranks = 0;
  for (const HostPort& t : targets) local_ranks += t.host == targets[options_.rank].host ? 1 : 0;
  oversubscribed_ = static_cast<unsigned>(local_ranks) > std::thread::hardware_concurrency();
  SetListenerControl();
  peer_addresses_ = std::move(addresses);
  peer_targets_ = targets;
  peers_set_ = true;
  lock.unlock();
  if (connect_up_) {
    // This rank connects to every higher rank now, so that each pair's one connection is
    // the lower rank's whichever of the two sends first (see OutState).
    std::unique_lock<std::mutex> io_lock(mu_);
    for (int q = options_.rank + 1; q < options_.world_size && !shutdown_; ++q) {
      const std::shared_ptr<OutConn>& o = out_conns_[q];
      if (o->state != OutState::kIdle) continue;
      o->target = targets[q];
      StartConnect(o);
    }
    UnlockAndDeliver(io_lock);
  }
  return Status::Ok();
}

std::string TcpTransport::Impl::DescribePeer(int peer) const {
  std::string name = "rank " + std::to_string(peer);
  if (peer == options_.rank) return name + " (" + address_ + ")";
  std::lock_guard<std::mutex> lock(peers_mu_);
  if (peers_set_ && peer >= 0 && peer < options_.world_size) {
    return name + " (" + peer_addresses_[peer] + ")";
  }
  return name;
}

uint64_t TcpTransport::Impl::BytesReceivedFrom(int peer) const {
  if (peer < 0 || peer >= options_.world_size) return 0;
  return bytes_received_[peer].load(std::memory_order_relaxed);
}

uint64_t TcpTransport::Impl::BytesSentTo(int peer) const {
  if (peer < 0 || peer >= options_.world_size) return 0;
  return bytes_sent_[peer].load(std::memory_order_relaxed);
}

uint64_t TcpTransport::Impl::SeqBytesOf(const SeqBytes* table, int peer, uint64_t seq) {
  if (peer < 0) return 0;
  const SeqBytes* s = table + static_cast<size_t>(peer) * kSeqSlots;
  for (int i = 0; i < kSeqSlots; ++i) {
    if (s[i].seq.load(std::memory_order_acquire) == seq) {
      return s[i].bytes.load(std::memory_order_relaxed);
    }
  }
  return 0;
}

void TcpTransport::Impl::CountSeqBytes(SeqBytes* table, std::vector<uint8_t>* next, int peer,
                                       uint64_t seq, uint64_t n) {
  SeqBytes* s = table + static_cast<size_t>(peer) * kSeqSlots;
  for (int i = 0; i < kSeqSlots; ++i) {
    if (s[i].seq.load(std::memory_order_relaxed) == seq) {
      s[i].bytes.fetch_add(n, std::memory_order_relaxed);
      return;
    }
  }
  SeqBytes& slot = s[(*next)[static_cast<size_t>(peer)]++ % kSeqSlots];
  slot.seq.store(~uint64_t{0}, std::memory_order_release);  // matches no operation meanwhile
  slot.bytes.store(n, std::memory_order_relaxed);
  slot.seq.store(seq, std::memory_order_release);
}

Status TcpTransport::Impl::ShutdownStatus() const {
  return AbortedError("the transport of rank " + std::to_string(options_.rank) + " is shut down");
}

// Why a message can pass the frame cap at all: calls over it are cut into segments
// (algo::LargeCallSegmentElems), except by the algorithms that send a block whole. Whether
// another algorithm would help depends on the collective (DescribeOversizeRemedy).
static std::string OversizeHint(const MessageHeader& header) {
  return ": " + DescribeOversizeRemedy(header.desc);
}

void TcpTransport::Impl::Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
                              DoneCallback done) {
  std::string refusal;
  if (peer < 0 || peer >= options_.world_size || peer == options_.rank) {
    refusal = "rank " + std::to_string(options_.rank) + " cannot send to rank " +
              std::to_string(peer) + " (world of " + std::to_string(options_.world_size) + ")";
  } else if (data == nullptr && bytes > 0) {
    refusal = "Send of " + std::to_string(bytes) + " bytes from a null buffer";
  } else if (bytes > options_.max_frame_bytes) {
    refusal = "Send of " + std::to_string(bytes) + " bytes to " + DescribePeer(peer) +
              " exceeds max_frame_bytes (" + std::to_string(options_.max_frame_bytes) + ")" +
              OversizeHint(header);
  }
  if (!refusal.empty()) {
    if (done) done(InvalidArgumentError(refusal));
    return;
  }
  // On the caller's thread: a frame for a connected peer with nothing queued is written
  // before Send returns, with no hand-off to the io thread.
  std::unique_lock<std::mutex> lock(mu_);
  SendOnIo(peer, header, static_cast<const uint8_t*>(data), bytes, std::move(done));
  UnlockAndDeliver(lock);
}

void TcpTransport::Impl::Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
                              DoneCallback done) {
  std::string refusal;
  if (peer < 0 || peer >= options_.world_size || peer == options_.rank) {
    refusal = "rank " + std::to_string(options_.rank) + " cannot receive from rank " +
              std::to_string(peer) + " (world of " + std::to_string(options_.world_size) + ")";
  } else if (data == nullptr && bytes > 0) {
    refusal = "Recv of " + std::to_string(bytes) + " bytes into a null buffer";
  } else if (bytes > options_.max_frame_bytes) {
    refusal = "Recv of " + std::to_string(bytes) + " bytes from " + DescribePeer(peer) +
              " exceeds max_frame_bytes (" + std::to_string(options_.max_frame_bytes) + ")" +
              OversizeHint(header);
  }
  if (!refusal.empty()) {
    if (done) done(InvalidArgumentError(refusal));
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  RecvOnIo(peer, header, static_cast<uint8_t*>(data), bytes, std::move(done));
  // Without a driver, somebody must read for this receive: the io thread.
  const std::shared_ptr<InConn>& c = recv_peers_[peer].conn;
  if (!driver_active_ && c && c->parked) Unpark(c);
  UnlockAndDeliver(lock);
}

void TcpTransport::Impl::WaitForIo(std::future<void>& done, const char* what) {
  Deadline deadline = Deadline::After(*clock_, kIoStallLimit);
  if (done.wait_for(deadline.Remaining(*clock_)) != std::future_status::ready) {
    LOG(FATAL) << "rank " << options_.rank << ": the transport io thread did not finish " << what
               << " within " << FormatDuration(kIoStallLimit) << "; a done callback must not block";
  }
}

// Every read and write of a caller's buffer happens holding mu_, so once this holds it and
// has redirected the operation's sinks, no thread touches those buffers again. Callbacks run
// without mu_, so this is safe inside one too.
void TcpTransport::Impl::CancelOperation(uint64_t seq, const Status& reason) {
  std::unique_lock<std::mutex> lock(mu_);
  CancelOnIo(seq, reason);
  UnlockAndDeliver(lock);
}

std::optional<StaleMessage> TcpTransport::Impl::TakeStale(uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  std::optional<StaleMessage> first;
  if (unexpected_bytes_ == 0) return first;
  for (size_t q = 0; q < recv_peers_.size(); ++q) {
    RecvPeer& p = recv_peers_[q];
    // Point-to-point messages have sequence numbers above every collective's.
    const auto end = p.unexpected.lower_bound(MessageKey{seq, 0});
    for (auto it = p.unexpected.begin(); it != end;) {
      const uint64_t s = it->first.first;
      if (FindCancel(s) == nullptr && (!first || s < first->seq)) {
        first = StaleMessage{static_cast<int>(q), s, it->first.second, it->second.desc};
      }
      unexpected_bytes_ -= it->second.charge;
      early_pool_.Give(std::move(it->second.payload));
      it = p.unexpected.erase(it);
    }
  }
  return first;
}

void TcpTransport::Impl::Shutdown() {
  if (OnIoThread()) {
    std::unique_lock<std::mutex> lock(mu_);
    ShutdownOnIo();
    UnlockAndDeliver(lock);
    return;
  }
  std::lock_guard<std::mutex> lock(shutdown_mu_);
  if (joined_) return;
  PostIfOpen([this] { return [this] { ShutdownOnIo(); }; });
  work_guard_.reset();
  WaitForIo(io_exited_future_, "Shutdown");
  io_thread_.join();
  joined_ = true;
}

void TcpTransport::Impl::Complete(DoneCallback done, Status status) {
  if (done) completions_.push_back(Completion{std::move(done), std::move(status)});
}

void TcpTransport::Impl::UnlockAndDeliver(std::unique_lock<std::mutex>& lock) {
  if (completions_.empty()) {
    lock.unlock();
    return;
  }
  // The batch takes the items; completions_ gets an empty vector that kept its capacity
  // (this thread's spare), so a steady stream of calls allocates nothing here.
  thread_local std::vector<Completion> spare;
  std::vector<Completion> batch = std::move(spare);
  batch.swap(completions_);
  // A driver waiting in poll would not see callbacks run on another thread.
  const bool wake_driver = driver_active_ && !OnDriverThread();
  // A callback may call back in (CancelOperation takes mu_ itself).
  lock.unlock();
  for (Completion& c : batch) c.done(std::move(c.status));
  batch.clear();
  if (spare.capacity() < batch.capacity()) spare = std::move(batch);
  if (wake_driver) Wake();
}

// ---- The driver: the thread that waits moves the bytes ------------------------------------

bool TcpTransport::Impl::AcquireDriver(size_t max_message_bytes) {
  if (OnIoThread() || max_message_bytes > options_.driver_max_message_bytes) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (driver_active_ || shutdown_) return false;
  driver_active_ = true;
  driver_thread_ = std::this_thread::get_id();
  return true;
}

void TcpTransport::Impl::ReleaseDriver() {
  std::unique_lock<std::mutex> lock(mu_);
  CHECK(OnDriverThread()) << "ReleaseDriver on a thread that does not hold the lease";
  driver_active_ = false;
  driver_thread_ = std::thread::id();
  // Writes the driver was waiting to finish (a cancelled frame still being completed, say)
  // go back to the io thread.
  for (const std::shared_ptr<OutConn>& o : out_conns_) {
    if (!o->driver_write) continue;
    o->driver_write = false;
    if (o->state == OutState::kReady) ArmWritable(o);
  }
  // Parked connections stay parked while nobody waits on them: the next operation's driver
  // reads what arrived in between straight from the kernel, and the io thread is not woken
  // twice per operation to park and unpark them. A receive posted without a lease (or left
  // over here) unparks its peer.
  for (RecvPeer& p : recv_peers_) {
    if (!p.posted.empty() && p.conn && p.conn->parked) Unpark(p.conn);
  }
  UnlockAndDeliver(lock);
}

void TcpTransport::Impl::ExpectSend(size_t bytes) {
  if (options_.bulk_congestion_control.empty()) return;
  // A few segments go out whatever the control: a barrier between two bulk operations
  // keeps the bulk one (and a connection new since gets it too).
  const bool bulk = bytes < kCongestionBlindBytes
                        ? bulk_now_.load()
                        : oversubscribed_ && bytes >= options_.bulk_send_bytes;
  if (bulk == bulk_now_ && !cc_unsettled_) return;  // the usual case: nothing to switch
  std::lock_guard<std::mutex> lock(mu_);
  bulk_now_ = bulk;
  cc_unsettled_ = false;
  for (const std::shared_ptr<OutConn>& o : out_conns_) {
    if (!o || !o->same_host || o->state != OutState::kReady || o->bulk_cc == bulk) continue;
    const std::string& between = options_.shared_cpu_congestion_control.empty()
                                     ? default_cc_
                                     : options_.shared_cpu_congestion_control;
    const std::string& target = bulk ? options_.bulk_congestion_control : between;
    if (target.empty()) continue;
    Status set = SetCongestionControl(o->fd(), target);
    // The connection works either way, only slower for large operations.
    LOG_IF_EVERY_N(WARNING, !set.ok(), 1000)
        << "rank " << options_.rank << ": " << set.ToString() << "; keeping the current control";
    if (set.ok()) o->bulk_cc = bulk;
  }
}

void TcpTransport::Impl::Wake() {
  const uint64_t one = 1;
  // EAGAIN only when the counter is saturated, and then a wake is pending anyway.
  ssize_t ignored = ::write(wake_fd_, &one, sizeof(one));
  (void)ignored;
}

bool TcpTransport::Impl::WaitingForLittle() const {
  for (const RecvPeer& p : recv_peers_) {
    for (const auto& [key, r] : p.posted) {
      if (r.bytes > kSpinMaxBytes) return false;
    }
    const InConn* c = p.conn.get();
    if (c != nullptr && c->phase == ReadPhase::kPayload && c->sink == Sink::kUser &&
        c->frame.payload_len - c->payload_got > kSpinMaxBytes) {
      return false;
    }
  }
  for (const std::shared_ptr<OutConn>& o : out_conns_) {
    if (o->driver_write) return false;  // the socket is full: a long write
  }
  return true;
}

namespace {

// epoll_pwait2 (a timespec, Linux 5.11) where the kernel has it, else epoll_wait with the
// timeout rounded up to a millisecond. Returns the events' count (0 on EINTR or error).
int EpollWait(int epoll_fd, std::vector<epoll_event>* events, const timespec& timeout) {
  static std::atomic<bool> no_pwait2{false};
  int rc = -1;
  if (!no_pwait2.load(std::memory_order_relaxed)) {
    rc = ::epoll_pwait2(epoll_fd, events->data(), static_cast<int>(events->size()), &timeout,
                        nullptr);
    if (rc < 0 && errno == ENOSYS) no_pwait2.store(true, std::memory_order_relaxed);
  }
  if (rc < 0 && no_pwait2.load(std::memory_order_relaxed)) {
    const int64_t ms = (int64_t{timeout.tv_sec} * 1000000000 + timeout.tv_nsec + 999999) / 1000000;
    rc = ::epoll_wait(epoll_fd, events->data(), static_cast<int>(events->size()),
                      static_cast<int>(std::min<int64_t>(ms, 1000)));
  }
  return std::max(rc, 0);
}

}  // namespace

bool TcpTransport::Impl::Wanted(const RecvPeer& p) {
  const InConn& c = *p.conn;
  return !p.posted.empty() || c.phase != ReadPhase::kHeader || c.header_got > 0 || c.Staged();
}

bool TcpTransport::Impl::Watch(InConn* c) {
  if (c->epoll_set == epoll_fd_) return true;
  const int fd = c->fd();
  if (fd < 0 || c->epoll_refused) return false;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = static_cast<uint64_t>(c->peer);
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) {
    const int err = errno;
    c->epoll_refused = true;
    LOG(WARNING) << "rank " << options_.rank << ": the connection from rank " << c->peer
                 << " cannot join the driver's epoll set (" << std::strerror(err)
                 << "); waits poll every connection instead, at a cost per wait in proportion "
                    "to the world";
    return false;
  }
  c->epoll_set = epoll_fd_;
  c->epoll_watched = fd;
  return true;
}

void TcpTransport::Impl::ReadIfIdle(uint64_t event) {
  if (event >= recv_peers_.size()) return;  // the wake-up eventfd
  const RecvPeer& p = recv_peers_[event];
  const std::shared_ptr<InConn> c = p.conn;  // a copy: a read that ends in EOF resets p.conn
  if (!c || c->closed || c->rejecting || c->epoll_set != epoll_fd_ || Wanted(p)) return;
  OnReadable(c, /*driven=*/true);
  // Like the idle connections a poll read, it joins this turn's wanted ones: the read may
  // have stopped at the turn's end (staged) or in the middle of a frame.
  poll_in_.push_back(c);
}

void TcpTransport::Impl::ReadReadyIdle() {
  const int rc =
      ::epoll_wait(epoll_fd_, epoll_events_.data(), static_cast<int>(epoll_events_.size()), 0);
  for (int k = 0; k < rc; ++k) ReadIfIdle(epoll_events_[k].data.u64);
}

void TcpTransport::Impl::Drive(TimePoint until) {
  std::unique_lock<std::mutex> lock(mu_);
  CHECK(OnDriverThread()) << "Drive on a thread that does not hold the lease";
  // Polls without sleeping for up to driver_spin first (see its comment), then blocks; but
  // only while what it waits for is small, as a long transfer gains nothing from it.
  // With more ranks than cores the rank this one waits for may need this very core, so it
  // yields the core between polls, for up to driver_yield_spin. A yield that comes back late
  // has handed the core to something that kept it for a time slice (a CPU hog, say): the
  // driver then sleeps at once, and goes on sleeping at once for a while (below).
  TimePoint spin_until{};
  const bool yield_between_polls = oversubscribed_;
  const Duration spin = yield_between_polls ? options_.driver_yield_spin : options_.driver_spin;
  if (spin > Duration::zero() && WaitingForLittle()) {
    const TimePoint now = clock_->Now();
    if (!yield_between_polls || now >= yield_refused_until_) {
      spin_until = std::min(until, now + spin);
    }
  }
  bool yielded_in_time = false;
  // Idle connections are polled on turns kIdlePollTurns, 2 kIdlePollTurns, ... of a spin,
  // and read at once when the sleep below finds them readable: a wait that ends on its first
  // turn, or sleeps at once, makes no poll of its own for them.
  uint32_t turn = 1;
  while (!shutdown_) {
    // Connections with a receive posted, or in the middle of a frame, are read at once;
    // the others (every peer is connected, most have nothing to say now) are read only
    // when one poll finds them readable, rather than a recv each per turn.
    // With the epoll set, the idle connections it watches are only counted: a turn then
    // costs no more per idle peer than a look at its state.
    poll_in_.clear();
    idle_in_.clear();
    size_t idle_watched = 0;
    bool all_watched = use_epoll_;
    for (const RecvPeer& p : recv_peers_) {
      InConn* c = p.conn.get();
      if (c == nullptr || c->closed || c->rejecting) continue;
      const bool watched = use_epoll_ && Watch(c);
      all_watched = all_watched && watched;
      if (Wanted(p)) {
        poll_in_.push_back(p.conn);
      } else if (watched) {
        ++idle_watched;
      } else {
        idle_in_.push_back(p.conn);
      }
    }
    for (const std::shared_ptr<InConn>& c : poll_in_) {
      if (!c->closed) OnReadable(c, /*driven=*/true);
    }
    const size_t first_idle = poll_in_.size();  // poll_in_[first_idle..] are idle_in_
    // What arrives there is for a later step or operation and waits in the kernel meanwhile:
    // they are looked at once per kIdlePollTurns turns of the spin, and the sleep below
    // watches them too.
    if (idle_watched > 0 || !idle_in_.empty()) {
      const bool look = turn++ % kIdlePollTurns == 0;
      // One look at the epoll set reads what is ready among the idle (the wanted were read
      // above), at one syscall whatever the number of connections.
      if (look && idle_watched > 0) ReadReadyIdle();
      if (look && !idle_in_.empty()) {
        idle_fds_.clear();
        for (const std::shared_ptr<InConn>& c : idle_in_)
          idle_fds_.push_back(pollfd{c->fd(), POLLIN, 0});
        if (::poll(idle_fds_.data(), idle_fds_.size(), 0) > 0) {
          for (size_t i = 0; i < idle_in_.size(); ++i) {
            if (idle_fds_[i].revents != 0 && !idle_in_[i]->closed) OnReadable(idle_in_[i], true);
          }
        }
      }
      // Whatever was read joins the next poll: it may have been cut at a frame boundary.
      for (const std::shared_ptr<InConn>& c : idle_in_) poll_in_.push_back(c);
    }
    for (const std::shared_ptr<OutConn>& o : out_conns_) {
      if (!o->driver_write) continue;
      o->driver_write = false;
      PumpWrites(o);
    }
    if (!completions_.empty()) break;
    const TimePoint now = clock_->Now();
    if (now >= until) break;
    bool staged = false;
    for (const std::shared_ptr<InConn>& c : poll_in_) staged = staged || c->Staged();
    if (staged) continue;  // a read stopped at its turn's end; the rest needs no poll
    if (now < spin_until) {
      lock.unlock();
      if (yield_between_polls) {
        const auto before = std::chrono::steady_clock::now();
        sched_yield();
        if (std::chrono::steady_clock::now() - before <= kYieldTooLate) {
          yielded_in_time = true;
        } else {
          // Refused for 5 ms after the first late yield, doubling while they keep coming,
          // up to a second: a rank that started up or reduced at length costs little, and a
          // CPU hog is tried about once a second.
          spin_until = TimePoint{};
          yielded_in_time = false;
          // 5 ms << 8 passes the one-second cap, so the count can stop there.
          late_yields_ = std::min(late_yields_ + 1, 9);
          yield_refused_until_ =
              now +
              std::min<Duration>(kYieldRefusalMax, kYieldRefusalMin * (1 << (late_yields_ - 1)));
        }
      }
      lock.lock();
      continue;
    }
    const auto wait = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::min<Duration>(until - now, Seconds(1)));
    timespec ts{static_cast<time_t>(wait.count() / 1000000000),
                static_cast<long>(wait.count() % 1000000000)};  // NOLINT(runtime/int)
    bool writes_wait = false;
    for (const std::shared_ptr<OutConn>& o : out_conns_) {
      writes_wait = writes_wait || (o->driver_write && o->state == OutState::kReady);
    }
    // Asleep on the epoll set unless a connection failed to join it or a write waits for
    // room (a long transfer, where one poll per wait costs nothing by comparison): a poll of
    // every descriptor then.
    if (all_watched && !writes_wait) {
      lock.unlock();
      const int rc = EpollWait(epoll_fd_, &epoll_events_, ts);
      lock.lock();
      bool woken = false;
      for (int k = 0; k < rc; ++k) woken = woken || epoll_events_[k].data.u64 == kWakeEvent;
      if (woken) {
        uint64_t count = 0;
        ssize_t ignored = ::read(wake_fd_, &count, sizeof(count));
        (void)ignored;
        break;
      }
      // As below: the wanted are read at the top of the next turn, the idle here.
      for (int k = 0; k < rc; ++k) ReadIfIdle(epoll_events_[k].data.u64);
      turn = 1;
      continue;
    }
    poll_fds_.clear();
    poll_conns_.clear();
    poll_fds_.push_back(pollfd{wake_fd_, POLLIN, 0});
    for (size_t i = 0; i < poll_in_.size(); ++i) {
      if (poll_in_[i]->closed) continue;
      poll_fds_.push_back(pollfd{poll_in_[i]->fd(), POLLIN, 0});
      poll_conns_.push_back(i);
    }
    for (const std::shared_ptr<OutConn>& o : out_conns_) {
      if (o->driver_write && o->state == OutState::kReady) {
        poll_fds_.push_back(pollfd{o->fd(), POLLOUT, 0});
      }
    }
    // The idle connections the epoll set watches wake this poll through it.
    const size_t epoll_at = poll_fds_.size();
    if (idle_watched > 0) poll_fds_.push_back(pollfd{epoll_fd_, POLLIN, 0});
    lock.unlock();
    const int rc = ::ppoll(poll_fds_.data(), poll_fds_.size(), &ts, nullptr);
    lock.lock();
    if (rc > 0 && (poll_fds_[0].revents & POLLIN) != 0) {
      uint64_t count = 0;
      ssize_t ignored = ::read(wake_fd_, &count, sizeof(count));
      (void)ignored;
      break;
    }
    if (rc > 0 && epoll_at < poll_fds_.size() && poll_fds_[epoll_at].revents != 0) {
      ReadReadyIdle();
    }
    // Wanted connections are read at the top of the next turn; idle ones that woke the sleep
    // are read here, from this poll's answer, rather than polled again.
    for (size_t k = 0; rc > 0 && k < poll_conns_.size(); ++k) {
      const std::shared_ptr<InConn>& c = poll_in_[poll_conns_[k]];
      if (poll_conns_[k] >= first_idle && poll_fds_[k + 1].revents != 0 && !c->closed) {
        OnReadable(c, true);
      }
    }
    turn = 1;
  }
  if (yielded_in_time) late_yields_ = 0;
  poll_in_.clear();
  UnlockAndDeliver(lock);
}

const Status* TcpTransport::Impl::FindCancel(uint64_t seq) const {
  auto it = cancelled_.find(seq);
  return it == cancelled_.end() ? nullptr : &it->second;
}

Status TcpTransport::Impl::CheckMatch(int peer, const FrameHeader& frame,
                                      const PendingRecv& recv) const {
  bool size_differs = frame.payload_len != recv.bytes;
  bool desc_differs = frame.desc != recv.header.desc;
  if (!size_differs && !desc_differs) return Status::Ok();
  return InvalidArgumentError(
      std::string(desc_differs ? "mismatched calls" : "mismatched sizes") + " at " +
      DescribeSeqTag(frame.seq, frame.tag) + ": " + DescribePeer(peer) + " sent " +
      DescribeOpDesc(frame.desc) + " with " + std::to_string(frame.payload_len) +
      " bytes, but this rank (rank " + std::to_string(options_.rank) + ") expected " +
      DescribeOpDesc(recv.header.desc) + " with " + std::to_string(recv.bytes) + " bytes");
}

// ---- Operations on the io thread ----------------------------------------------------------

void TcpTransport::Impl::SendOnIo(int peer, const MessageHeader& header, const uint8_t* data,
                                  size_t bytes, DoneCallback done) {
  if (shutdown_) return Complete(std::move(done), ShutdownStatus());
  if (const Status* reason = FindCancel(header.seq)) return Complete(std::move(done), *reason);
  const std::shared_ptr<OutConn>& o = out_conns_[peer];
  if (o->state == OutState::kFailed) return Complete(std::move(done), o->failure);
  if (o->state == OutState::kIdle) {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (!peers_set_) {
      return Complete(
          std::move(done),
          InvalidArgumentError("rank " + std::to_string(options_.rank) + " sent to rank " +
                               std::to_string(peer) + " before SetPeers"));
    }
    o->target = peer_targets_[peer];
  }
  SendOp op;
  op.seq = header.seq;
  FrameHeader frame;
  frame.type = FrameType::kData;
  frame.seq = header.seq;
  frame.tag = header.tag;
  frame.payload_len = bytes;
  frame.desc = header.desc;
  EncodeFrameHeader(frame, op.header.data());
  op.data = data;
  op.bytes = bytes;
  op.done = std::move(done);
  o->queue.push_back(std::move(op));
  if (o->state == OutState::kIdle) {
    const RecvPeer& p = recv_peers_[peer];
    if (connect_up_ && peer < options_.rank && !p.conn && p.closed.ok()) {
      return AwaitPeerConnection(o);
    }
    StartConnect(o);
  } else if (o->state == OutState::kReady) {
    PumpWrites(o);
  }
}

void TcpTransport::Impl::ConnectQueued(const std::shared_ptr<OutConn>& o) {
  {
    std::lock_guard<std::mutex> lock(peers_mu_);
    if (!peers_set_) return;  // the sends wait for their callers' deadlines
    o->target = peer_targets_[o->peer];
  }
  StartConnect(o);
}

void TcpTransport::Impl::AwaitPeerConnection(const std::shared_ptr<OutConn>& o) {
  o->state = OutState::kAwaiting;
  auto arm = [this, o] {
    if (o->state != OutState::kAwaiting) return;
    const uint64_t id = o->attempt;
    o->timer.expires_after(kAwaitPeerConnection);
    o->timer.async_wait(Wrap([this, o, id](const asio::error_code& ec) {
      if (ec || o->attempt != id || o->state != OutState::kAwaiting) return;
      VLOG(1) << "rank " << options_.rank << ": no connection from " << DescribePeer(o->peer)
              << " within " << FormatDuration(kAwaitPeerConnection) << "; connecting to it";
      o->state = OutState::kIdle;
      StartConnect(o);
    }));
  };
  // Timers are armed on the io thread only.
  if (OnIoThread()) return arm();
  PostIfOpen([&] { return arm; });
}

void TcpTransport::Impl::RecvOnIo(int peer, const MessageHeader& header, uint8_t* data,
                                  size_t bytes, DoneCallback done) {
  if (shutdown_) return Complete(std::move(done), ShutdownStatus());
  if (const Status* reason = FindCancel(header.seq)) return Complete(std::move(done), *reason);
  PendingRecv recv{header, data, bytes, std::move(done)};
  RecvPeer& p = recv_peers_[peer];
  MessageKey key{header.seq, header.tag};

  auto buffered = First(p.unexpected, key);
  if (buffered != p.unexpected.end()) {
    BufferedMessage msg = std::move(buffered->second);
    p.unexpected.erase(buffered);
    unexpected_bytes_ -= msg.charge;
    FrameHeader frame;
    frame.seq = header.seq;
    frame.tag = header.tag;
    frame.payload_len = msg.bytes;
    frame.desc = msg.desc;
    Status match = CheckMatch(peer, frame, recv);
    if (match.ok() && bytes > 0) std::memcpy(data, msg.payload.data.get(), bytes);
    early_pool_.Give(std::move(msg.payload));
    return Complete(std::move(recv.done), match);
  }

  // An early message of this operation from this peer under another tag, carrying another
  // call's fingerprint: the ranks made different calls; say so at once.
  auto same_op = p.unexpected.lower_bound(MessageKey{header.seq, 0});
  if (same_op != p.unexpected.end() && same_op->first.first == header.seq &&
      same_op->second.desc != header.desc) {
    FrameHeader frame;
    frame.seq = header.seq;
    frame.tag = same_op->first.second;
    frame.payload_len = same_op->second.bytes;
    frame.desc = same_op->second.desc;
    return Complete(std::move(recv.done), CheckMatch(peer, frame, recv));
  }

  // The message may be streaming in right now as an early one: take it over, so the rest of
  // it lands directly in the caller's buffer.
  const std::shared_ptr<InConn>& c = p.conn;
  if (c && c->phase == ReadPhase::kPayload && c->sink == Sink::kBuffer &&
      c->frame.seq == header.seq && c->frame.tag == header.tag) {
    unexpected_bytes_ -= c->buffer_charge;
    c->buffer_charge = 0;
    Status match = CheckMatch(peer, c->frame, recv);
    if (match.ok()) {
      if (c->payload_got > 0) std::memcpy(data, c->buffer.data.get(), c->payload_got);
      early_pool_.Give(std::exchange(c->buffer, PooledBuffer()));
      c->recv = std::move(recv);
      c->sink = Sink::kUser;
      return;
    }
    c->buffer = PooledBuffer();
    c->sink = Sink::kDiscard;
    return Complete(std::move(recv.done), match);
  }

  if (!p.closed.ok()) return Complete(std::move(recv.done), p.closed);
  p.posted.emplace(key, std::move(recv));
  // A receive from a lower rank whose connection has not come (it connects up): waited for
  // as a send would be, then connected to from here. Nothing is sent on it; a port that
  // refuses to the end means that rank is gone, and the receive fails naming it rather than
  // waiting on a connection that will never come.
  const std::shared_ptr<OutConn>& o = out_conns_[peer];
  if (connect_up_ && peer < options_.rank && !p.conn && o->state == OutState::kIdle) {
    {
      std::lock_guard<std::mutex> lock(peers_mu_);
      if (!peers_set_) return;
      o->target = peer_targets_[peer];
    }
    AwaitPeerConnection(o);
  }
}

void TcpTransport::Impl::CancelOnIo(uint64_t seq, const Status& reason) {
  cancelled_[seq] = reason;
  while (cancelled_.size() > kMaxRememberedCancels) cancelled_.erase(cancelled_.begin());

  auto in_seq = [seq](auto& map) {
    return std::make_pair(map.lower_bound(MessageKey{seq, 0}),
                          seq == UINT64_MAX ? map.end() : map.lower_bound(MessageKey{seq + 1, 0}));
  };
  for (RecvPeer& p : recv_peers_) {
    auto [posted_begin, posted_end] = in_seq(p.posted);
    for (auto it = posted_begin; it != posted_end; ++it) {
      Complete(std::move(it->second.done), reason);
    }
    p.posted.erase(posted_begin, posted_end);
    auto [early_begin, early_end] = in_seq(p.unexpected);
    for (auto it = early_begin; it != early_end; ++it) unexpected_bytes_ -= it->second.charge;
    p.unexpected.erase(early_begin, early_end);
  }

  for (const std::shared_ptr<InConn>& c : in_conns_) {
    if (c->closed || c->phase != ReadPhase::kPayload || c->frame.seq != seq) continue;
    if (c->sink == Sink::kUser) {
      Complete(std::move(c->recv.done), reason);
      c->recv = PendingRecv();
    } else if (c->sink == Sink::kBuffer) {
      unexpected_bytes_ -= c->buffer_charge;
      c->buffer_charge = 0;
      c->buffer = PooledBuffer();
    }
    c->sink = Sink::kDiscard;
  }

  for (const std::shared_ptr<OutConn>& o : out_conns_) {
    // A frame cut mid-write whose rest cannot be kept (no memory for it): the stream cannot
    // be finished, so the connection goes, after this loop over its queue.
    std::string unfinished;
    for (auto it = o->queue.begin(); it != o->queue.end();) {
      if (it->seq != seq || !it->done) {
        ++it;
        continue;
      }
      Complete(std::move(it->done), reason);
      if (it->sent == 0) {
        it = o->queue.erase(it);
        continue;
      }
      size_t payload_sent = it->sent > kFrameHeaderBytes ? it->sent - kFrameHeaderBytes : 0;
      if (payload_sent < it->bytes) {
        size_t rest = it->bytes - payload_sent;
        // Not `new`: under a memory limit a cancelled send of hundreds of MiB threw bad_alloc
        // here, on the io path, and the process aborted.
        it->owned = AllocateLarge(rest);
        if (it->owned == nullptr) {
          unfinished = "rank " + std::to_string(options_.rank) + " closed its connection to rank " +
                       std::to_string(o->peer) + ": a cancelled message to it was cut after " +
                       std::to_string(payload_sent) + " of " + std::to_string(it->bytes) +
                       " bytes, and this rank cannot allocate the " + std::to_string(rest) +
                       " bytes it needs to finish the frame";
        } else {
          std::memcpy(it->owned.get(), it->data + payload_sent, rest);
          it->owned_from = payload_sent;
        }
      }
      it->data = nullptr;
      ++it;
    }
    if (!unfinished.empty()) FailOut(o, ResourceExhaustedError(unfinished));
  }
}

void TcpTransport::Impl::ShutdownOnIo() {
  if (shutdown_) return;
  shutdown_ = true;
  {
    std::lock_guard<std::mutex> lock(post_mu_);
    io_closed_ = true;
  }
  Status status = ShutdownStatus();
  asio::error_code ignored;
  acceptor_.close(ignored);
  accept_retry_timer_.cancel();
  for (const std::shared_ptr<InConn>& c : in_conns_) {
    c->closed = true;
    c->Close();
    c->handshake_timer.cancel();
    if (c->phase == ReadPhase::kPayload && c->sink == Sink::kUser) {
      Complete(std::move(c->recv.done), status);
    }
  }
  in_conns_.clear();
  handshaking_ = {};
  for (RecvPeer& p : recv_peers_) {
    for (auto& [key, r] : p.posted) Complete(std::move(r.done), status);
    p.posted.clear();
    p.unexpected.clear();
    p.conn.reset();
  }
  unexpected_bytes_ = 0;
  for (const std::shared_ptr<OutConn>& o : out_conns_) FailOut(o, status);
}

// ---- Accepted connections: handshake and the receive path ----------------------------------

void TcpTransport::Impl::StartAccept() {
  acceptor_.async_accept(Wrap([this](const asio::error_code& ec, tcp::socket socket) {
    if (shutdown_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // E.g. out of descriptors: back off instead of spinning on the error.
      LOG(WARNING) << "rank " << options_.rank << " failed to accept a connection on " << address_
                   << ": " << ec.message();
      accept_retry_timer_.expires_after(kAcceptRetryDelay);
      accept_retry_timer_.async_wait(Wrap([this](const asio::error_code& timer_ec) {
        if (!timer_ec && !shutdown_) StartAccept();
      }));
      return;
    }
    OnAccepted(std::move(socket));
    StartAccept();
  }));
}

void TcpTransport::Impl::OnAccepted(tcp::socket socket) {
  asio::error_code ec;
  tcp::endpoint remote = socket.remote_endpoint(ec);
  std::string who = ec ? std::string("an unknown address") : FormatEndpoint(remote);
  // At the cap, the connection that has waited longest in the handshake is cut off rather
  // than the newcomer: a rank proves itself in milliseconds, so strangers holding idle
  // connections (no secret needed) cannot keep the job's ranks from connecting.
  const bool room = handshaking_.MakeRoom(
      static_cast<size_t>(std::max(options_.max_unauthenticated_connections, 0)),
      [&](const std::shared_ptr<InConn>& oldest, size_t waiting) {
        // Every connection in the queue is live: CloseIn takes it off.
        RefuseStranger(oldest, auth::Refusal::kOverCap,
                       "the longest waiting of " + std::to_string(waiting) +
                           " connections in the handshake (the cap), cut off for a newcomer");
      });
  if (!room) {
    refusals_.Count(auth::Refusal::kOverCap);
    int64_t held_back = 0;
    if (refusal_log_.Allow(SteadyClock::Get()->Now(), &held_back)) {
      LOG(WARNING) << "rank " << options_.rank << " refused a connection from " << who
                   << ": already " << handshaking_.size()
                   << " connections in the handshake (the cap) ["
                   << auth::RefusalName(auth::Refusal::kOverCap) << "]"
                   << refusal_log_.HeldBackNote(held_back);
    }
    socket.close(ec);
    return;
  }
  SetSocketOptions(socket, options_, !oversubscribed_, default_cc_);
  socket.non_blocking(true, ec);
  if (ec) {
    LOG(WARNING) << "rank " << options_.rank << " dropped a connection from " << who << ": "
                 << ec.message();
    return;
  }
  auto c = std::make_shared<InConn>(std::move(socket), io_);
  c->remote = who;
  c->acceptor =
      std::make_unique<auth::Acceptor>(auth::Channel::kPeer, &credentials_, &replay_guard_);
  in_conns_.insert(c);
  handshaking_.Add(c);
  c->handshake_timer.expires_after(options_.handshake_timeout);
  c->handshake_timer.async_wait(Wrap([this, c](const asio::error_code& timer_ec) {
    if (timer_ec || c->closed || c->handshake_done) return;
    if (c->rejecting) return CloseIn(c, UnavailableError("refused"));
    RefuseStranger(c, auth::Refusal::kTimeout,
                   "no complete handshake within " + FormatDuration(options_.handshake_timeout));
  }));
  OnReadable(c);
}

std::string TcpTransport::Impl::DescribeIn(const InConn& c) const {
  return c.handshake_done ? DescribePeer(c.peer) : c.remote;
}

void TcpTransport::Impl::WaitReadable(const std::shared_ptr<InConn>& c) {
  if (c->Staged()) {
    // What is left in the stage is readable now; the socket may stay quiet.
    PostIfOpen([&] {
      return [this, c] {
        if (!shutdown_ && !c->closed && !c->rejecting) OnReadable(c);
      };
    });
    return;
  }
  c->socket.async_wait(
      tcp::socket::wait_read, Wrap([this, c](const asio::error_code& ec) {
        if (shutdown_ || c->closed || c->rejecting || ec == asio::error::operation_aborted) return;
        if (ec) {
          Drop(c, "waiting for data failed: " + ec.message());
          return;
        }
        OnReadable(c);
      }));
}

void TcpTransport::Impl::Park(const std::shared_ptr<InConn>& c) {
  asio::error_code ec;
  const tcp protocol = c->socket.local_endpoint(ec).protocol();
  if (ec) return;
  const int fd = c->socket.release(ec);
  if (ec) return;
  c->protocol = protocol;
  c->parked_fd = fd;
  c->parked = true;
}

void TcpTransport::Impl::Unpark(const std::shared_ptr<InConn>& c) {
  if (c->unpark_posted) return;
  auto unpark = [this, c] {
    c->unpark_posted = false;
    if (c->closed || !c->parked || driver_active_) return;
    asio::error_code ec;
    c->socket.assign(c->protocol, c->parked_fd, ec);
    if (ec) return Drop(c, "cannot hand the socket back to the io thread: " + ec.message());
    c->parked_fd = -1;
    c->parked = false;
    OnReadable(c);
  };
  if (OnIoThread()) return unpark();
  c->unpark_posted = PostIfOpen([&] { return unpark; });
}

// Reads with non-blocking read_some into whatever buffer the current frame needs. No read
// is ever left pending on a caller's buffer, so CancelOperation only has to redirect the
// sink: the next read goes wherever the sink then points.
void TcpTransport::Impl::OnReadable(const std::shared_ptr<InConn>& c, bool driven) {
  if (!driven && c->parked) return;  // a driver's now, until Unpark
  size_t turn_left = kIoTurnBytes;
  while (!c->closed && !c->rejecting && !shutdown_) {
    if (!driven && c->handshake_done && driver_active_ && !c->reply_in_flight && !c->parked) {
      // The driver reads this connection from now on; wake it so it polls this socket too
      // (it may be a new one).
      Park(c);
      if (c->parked) return Wake();
    }
    asio::mutable_buffer target;
    switch (c->phase) {
      case ReadPhase::kHeader:
        target =
            asio::buffer(c->header_bytes.data() + c->header_got, kFrameHeaderBytes - c->header_got);
        break;
      case ReadPhase::kMeta:
        target = asio::buffer(c->meta.data() + c->meta_got, c->meta.size() - c->meta_got);
        break;
      case ReadPhase::kPayload: {
        size_t want = static_cast<size_t>(
            std::min<uint64_t>(c->frame.payload_len - c->payload_got, kReadChunkBytes));
        if (c->sink == Sink::kUser) {
          target = asio::buffer(c->recv.data + c->payload_got, want);
        } else if (c->sink == Sink::kBuffer) {
          if (driven) want = std::min(want, kEarlyTurnBytes);
          target = asio::buffer(c->buffer.data.get() + c->payload_got, want);
        } else {
          target = asio::buffer(discard_.get(), std::min(want, kDiscardBufferBytes));
        }
        break;
      }
    }
    // A driver stops at a frame boundary once something completed, rather than spend a
    // syscall on a socket that is most likely empty: Drive returns the completion at once,
    // and the next Drive reads on from here. An early message waits too (kEarlyTurnBytes).
    if (driven) {
      const bool at_boundary = c->phase == ReadPhase::kHeader && c->header_got == 0 && !c->Staged();
      const bool early = c->phase == ReadPhase::kPayload && c->sink == Sink::kBuffer;
      if ((at_boundary || early) && !completions_.empty()) return;
      if (early && kIoTurnBytes - turn_left >= kEarlyTurnBytes) return;
    }
    asio::error_code ec;
    size_t n = 0;
    const ssize_t got = ReadSome(*c, static_cast<uint8_t*>(target.data()), target.size());
    if (got > 0) {
      n = static_cast<size_t>(got);
    } else if (got == 0) {
      ec = asio::error::eof;
    } else if (errno == EINTR) {
      continue;
    } else {
      ec = asio::error_code(errno, asio::error::get_system_category());
    }
    if (WouldBlock(ec)) {
      if (!driven) WaitReadable(c);
      return;
    }
    if (ec) {
      if (!c->handshake_done) {
        // Closed between frames: its connector went away (a rank that exited or gave up
        // while connecting, or a scan), which is no garbage; in a frame's middle it is.
        const bool between = c->phase == ReadPhase::kHeader && c->header_got == 0;
        return RefuseStranger(c, between ? auth::Refusal::kAbandoned : auth::Refusal::kMalformed,
                              std::string("closed during the handshake") +
                                  (between ? ", between messages" : "") + ": " + ec.message());
      }
      Status reason =
          UnavailableError("connection from " + DescribePeer(c->peer) + " closed: " + ec.message());
      VLOG(1) << "rank " << options_.rank << ": " << reason.message();
      return CloseIn(c, reason);
    }
    switch (c->phase) {
      case ReadPhase::kHeader:
        c->header_got += n;
        if (c->header_got == kFrameHeaderBytes) OnHeader(c);
        break;
      case ReadPhase::kMeta:
        c->meta_got += n;
        if (c->meta_got == c->meta.size()) {
          if (!c->handshake_done) {
            OnHandshakeFrame(c);
          } else if (c->frame.type == FrameType::kGoodbye) {
            OnGoodbye(c);
          } else {
            StartPayload(c);
          }
        }
        break;
      case ReadPhase::kPayload:
        c->payload_got += n;
        bytes_received_[c->peer].fetch_add(n, std::memory_order_relaxed);
        CountSeqBytes(received_by_seq_.get(), &received_slot_next_, c->peer, c->frame.seq, n);
        if (c->payload_got == c->frame.payload_len) FinishPayload(c);
        break;
    }
    if (n >= turn_left) {
      if (!driven) WaitReadable(c);
      return;
    }
    turn_left -= n;
  }
}

ssize_t TcpTransport::Impl::ReadSome(InConn& c, uint8_t* data, size_t size) {
  if (c.Staged()) {
    const size_t n = std::min(size, c.stage_end - c.stage_begin);
    std::memcpy(data, c.stage.get() + c.stage_begin, n);
    c.stage_begin += n;
    return static_cast<ssize_t>(n);
  }
  if (!c.handshake_done || size >= kStageBytes) return ::recv(c.fd(), data, size, MSG_DONTWAIT);
  if (!c.stage) c.stage = std::make_unique<uint8_t[]>(kStageBytes);
  const ssize_t got = ::recv(c.fd(), c.stage.get(), kStageBytes, MSG_DONTWAIT);
  if (got <= 0) return got;
  const size_t n = std::min(size, static_cast<size_t>(got));
  std::memcpy(data, c.stage.get(), n);
  c.stage_begin = n;
  c.stage_end = static_cast<size_t>(got);
  return static_cast<ssize_t>(n);
}

void TcpTransport::Impl::OnHeader(const std::shared_ptr<InConn>& c) {
  c->header_got = 0;
  FrameLimits limits;
  if (c->handshake_done) {
    limits.max_meta_bytes = kMaxDataMetaBytes;
    limits.max_payload_bytes = options_.max_frame_bytes;
  } else {
    limits.max_meta_bytes = kMaxHandshakeMetaBytes;
    limits.max_payload_bytes = 0;
  }
  Status decoded = DecodeFrameHeader(c->header_bytes.data(), limits, &c->frame);
  if (!decoded.ok()) {
    if (!c->handshake_done) return RefuseStranger(c, auth::Refusal::kMalformed, decoded.message());
    return Drop(c, decoded.message());
  }
  FrameType expected = FrameType::kData;
  if (!c->handshake_done) {
    expected = c->challenge.empty() ? FrameType::kHello : FrameType::kProof;
  } else if (c->frame.type == FrameType::kGoodbye && c->frame.payload_len == 0) {
    expected = FrameType::kGoodbye;
  }
  if (c->frame.type != expected) {
    std::string why = std::string("got a ") + FrameTypeName(c->frame.type) + " frame where a " +
                      FrameTypeName(expected) + " frame belongs";
    if (!c->handshake_done) return RefuseStranger(c, auth::Refusal::kProtocol, why);
    return Drop(c, why);
  }
  if (c->frame.meta_len > 0) {
    c->meta.resize(c->frame.meta_len);
    c->meta_got = 0;
    c->phase = ReadPhase::kMeta;
    return;
  }
  c->meta.clear();
  if (!c->handshake_done) return OnHandshakeFrame(c);
  if (c->frame.type == FrameType::kGoodbye) return OnGoodbye(c);
  StartPayload(c);
}

void TcpTransport::Impl::OnHandshakeFrame(const std::shared_ptr<InConn>& c) {
  c->phase = ReadPhase::kHeader;
  const std::string meta(c->meta.begin(), c->meta.end());
  c->meta.clear();
  auth::Acceptor& acceptor = *c->acceptor;
  if (c->frame.type == FrameType::kHello) {
    StatusOr<std::string> challenge = acceptor.Challenge(meta);
    if (!challenge.ok()) {
      return RefuseStranger(c, acceptor.refusal(), challenge.status().message());
    }
    c->challenge = EncodeControlFrame(FrameType::kChallenge, *challenge);
    asio::async_write(c->socket, asio::buffer(c->challenge),
                      Wrap([this, c](const asio::error_code& ec, size_t) {
                        if (ec && !c->closed && !shutdown_) {
                          RefuseStranger(c, auth::Refusal::kMalformed,
                                         "cannot send the challenge: " + ec.message());
                        }
                      }));
    return;
  }
  Status proof = acceptor.CheckProof(meta);
  if (!proof.ok()) return RefuseStranger(c, acceptor.refusal(), proof.message());
  OnAuthenticated(c);
}

// The connector has proved it is rank q of this job; nothing above changed any state.
void TcpTransport::Impl::OnAuthenticated(const std::shared_ptr<InConn>& c) {
  const int q = c->acceptor->peer_rank();
  RecvPeer& p = recv_peers_[q];
  if (p.conn || !p.closed.ok()) {
    // A rank of this job (it proved the secret), so it may be told why.
    const std::string why =
        "rank " + std::to_string(q) + " already connected to rank " + std::to_string(options_.rank);
    refusals_.Count(auth::Refusal::kDuplicate);
    LOG(WARNING) << "rank " << options_.rank << " refused the connection from " << c->remote << ": "
                 << why << " [" << auth::RefusalName(auth::Refusal::kDuplicate) << "]";
    c->rejecting = true;
    c->reply = EncodeControlFrame(FrameType::kHelloAck, c->acceptor->Refuse(why));
    // The handshake timer stays armed, so a refused peer that never reads is still cut off.
    asio::async_write(c->socket, asio::buffer(c->reply),
                      Wrap([this, c](const asio::error_code&, size_t) {
                        CloseIn(c, UnavailableError("refused"));
                      }));
    return;
  }
  c->peer = q;
  c->handshake_done = true;
  handshaking_.Remove(c);
  c->handshake_timer.cancel();
  p.conn = c;
  VLOG(1) << "rank " << options_.rank << " accepted a connection from " << DescribePeer(q) << " at "
          << c->remote;
  // Messages travel both ways on one connection per pair, as on any socket: a reply then
  // carries the ACK of the message it answers, where a connection each way sends every ACK
  // in a segment of its own (an extra trip through the loopback and a softirq for each
  // small message). So unless this rank has begun connecting to q itself (both connected at
  // once: each keeps its own), it promises q its messages on this connection.
  const std::shared_ptr<OutConn>& o = out_conns_[q];
  const bool adopt = options_.one_connection_per_pair &&
                     (o->state == OutState::kIdle || o->state == OutState::kAwaiting);
  if (adopt) {
    ++o->attempt;  // a waiting timer is stale now
    o->timer.cancel();
    o->state = OutState::kAdopting;
  }
  c->reply = EncodeControlFrame(FrameType::kHelloAck, c->acceptor->Accept(adopt));
  c->acceptor.reset();
  c->challenge.clear();
  c->reply_in_flight = true;
  asio::async_write(c->socket, asio::buffer(c->reply),
                    Wrap([this, c, adopt](const asio::error_code& ec, size_t) {
                      c->reply_in_flight = false;
                      const std::shared_ptr<OutConn>& o = out_conns_[c->peer];
                      if (adopt && o->state == OutState::kAdopting) {
                        if (!ec && !c->closed && !shutdown_) return Adopt(c, o);
                        // The connection is gone: what was queued for q connects anew
                        // (or waits for q to connect again, which it does after a failed
                        // handshake).
                        o->state = OutState::kIdle;
                        if (!o->queue.empty() && !shutdown_) ConnectQueued(o);
                      }
                      if (ec && !c->closed && !shutdown_) {
                        Drop(c, "cannot answer the hello: " + ec.message());
                      }
                    }));
}

void TcpTransport::Impl::StartPayload(const std::shared_ptr<InConn>& c) {
  c->phase = ReadPhase::kPayload;
  c->payload_got = 0;
  const FrameHeader& f = c->frame;
  RecvPeer& p = recv_peers_[c->peer];
  MessageKey key{f.seq, f.tag};
  auto posted = First(p.posted, key);
  if (FindCancel(f.seq) != nullptr) {
    c->sink = Sink::kDiscard;
  } else if (posted != p.posted.end()) {
    PendingRecv recv = std::move(posted->second);
    p.posted.erase(posted);
    Status match = CheckMatch(c->peer, f, recv);
    if (match.ok()) {
      c->recv = std::move(recv);
      c->sink = Sink::kUser;
    } else {
      Complete(std::move(recv.done), match);
      c->sink = Sink::kDiscard;
    }
  } else {
    // A receive already posted for this operation from this peer, under another tag and
    // with another fingerprint: the two ranks made different calls. Fail it now rather
    // than at its deadline (the message itself is kept, as any early one).
    auto same_op = p.posted.lower_bound(MessageKey{f.seq, 0});
    if (same_op != p.posted.end() && same_op->first.first == f.seq &&
        same_op->second.header.desc != f.desc) {
      PendingRecv other = std::move(same_op->second);
      p.posted.erase(same_op);
      Complete(std::move(other.done), CheckMatch(c->peer, f, other));
    }
    size_t charge = static_cast<size_t>(f.payload_len) + kBufferedMessageOverhead;
    if (unexpected_bytes_ + charge > options_.max_unexpected_bytes) {
      // The sender's doing as much as this rank's (a flood nobody asked for): Unavailable.
      return Drop(c, "sent " + std::to_string(f.payload_len) + " bytes for " +
                         DescribeSeqTag(f.seq, f.tag) +
                         " before the receive was posted, over max_unexpected_bytes (" +
                         std::to_string(unexpected_bytes_) + " of " +
                         std::to_string(options_.max_unexpected_bytes) + " bytes in use)");
    }
    PooledBuffer buffer = early_pool_.Take(static_cast<size_t>(f.payload_len));
    if (buffer.data == nullptr) {
      return Drop(c,
                  "sent " + std::to_string(f.payload_len) + " bytes for " +
                      DescribeSeqTag(f.seq, f.tag) +
                      " before the receive was posted, and this rank cannot allocate a "
                      "buffer of that size to hold them",
                  StatusCode::kResourceExhausted, f.seq);
    }
    unexpected_bytes_ += charge;
    c->buffer_charge = charge;
    c->buffer = std::move(buffer);
    c->sink = Sink::kBuffer;
  }
  if (f.payload_len == 0) FinishPayload(c);
}

void TcpTransport::Impl::FinishPayload(const std::shared_ptr<InConn>& c) {
  if (c->sink == Sink::kUser) {
    Complete(std::move(c->recv.done), Status::Ok());
    c->recv = PendingRecv();
  } else if (c->sink == Sink::kBuffer) {
    BufferedMessage msg;
    msg.desc = c->frame.desc;
    msg.payload = std::move(c->buffer);
    msg.bytes = static_cast<size_t>(c->frame.payload_len);
    msg.charge = c->buffer_charge;
    c->buffer_charge = 0;
    recv_peers_[c->peer].unexpected.emplace(MessageKey{c->frame.seq, c->frame.tag}, std::move(msg));
  }
  c->sink = Sink::kDiscard;
  c->phase = ReadPhase::kHeader;
}

void TcpTransport::Impl::RefuseStranger(const std::shared_ptr<InConn>& c, auth::Refusal refusal,
                                        const std::string& why) {
  if (c->closed) return;
  refusals_.Count(refusal);
  int64_t held_back = 0;
  if (refusal_log_.Allow(SteadyClock::Get()->Now(), &held_back)) {
    (refusal == auth::Refusal::kAbandoned ? LOG(INFO) : LOG(WARNING))
        << "rank " << options_.rank << " refused the connection from " << c->remote << ": " << why
        << " [" << auth::RefusalName(refusal) << "]" << refusal_log_.HeldBackNote(held_back);
  }
  CloseIn(c, UnavailableError("refused"));
}

void TcpTransport::Impl::Drop(const std::shared_ptr<InConn>& c, const std::string& why,
                              StatusCode code, uint64_t seq) {
  if (c->closed) return;
  LOG(WARNING) << "rank " << options_.rank << " dropped the connection from " << DescribeIn(*c)
               << ": " << why;
  const Status reason(code, DroppedConnectionText(options_.rank, DescribeIn(*c), why));
  if (code == StatusCode::kResourceExhausted && seq != 0) {
    exhausted_ = Exhaustion{seq, reason.ToString()};
  }
  SayGoodbye(c, reason.message());
  CloseIn(c, reason);
}

void TcpTransport::Impl::SayGoodbye(const std::shared_ptr<InConn>& c, const std::string& reason) {
  // The hello ack may still count as in flight (its handler has not run), but a peer that
  // sent frames after the handshake read the whole of it first.
  if (c->closed || !c->handshake_done) return;
  if (c->shared) {
    // This rank's messages share the connection: a frame it has begun must not be cut.
    const std::shared_ptr<OutConn>& o = out_conns_[c->peer];
    if (o && !o->queue.empty() && o->queue.front().sent != 0) return;
  }
  const std::vector<uint8_t> frame = EncodeGoodbye(reason);
  const ssize_t sent = ::send(c->fd(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  VLOG(1) << "rank " << options_.rank << ": goodbye to " << DescribeIn(*c)
          << (sent == static_cast<ssize_t>(frame.size()) ? " sent" : " not sent");
}

void TcpTransport::Impl::OnGoodbye(const std::shared_ptr<InConn>& c) {
  const size_t shown = std::min(c->meta.size(), kMaxGoodbyeBytes);
  const Status reason = UnavailableError(std::string(c->meta.begin(), c->meta.begin() + shown));
  c->meta.clear();
  c->phase = ReadPhase::kHeader;
  LOG(WARNING) << "rank " << options_.rank << ": " << reason.message();
  CloseIn(c, reason);
}

void TcpTransport::Impl::CloseIn(const std::shared_ptr<InConn>& c, const Status& reason) {
  if (c->closed) return;
  c->closed = true;
  c->Close();
  c->handshake_timer.cancel();
  in_conns_.erase(c);
  if (!c->handshake_done) {
    handshaking_.Remove(c);
    return;
  }
  RecvPeer& p = recv_peers_[c->peer];
  if (p.conn == c) p.conn.reset();
  if (c->phase == ReadPhase::kPayload) {
    if (c->sink == Sink::kUser) Complete(std::move(c->recv.done), reason);
    if (c->sink == Sink::kBuffer) unexpected_bytes_ -= c->buffer_charge;
    c->recv = PendingRecv();
    c->buffer = PooledBuffer();
    c->buffer_charge = 0;
    c->sink = Sink::kDiscard;
  }
  CloseReceives(&p, reason);
  if (c->shared) FailOut(out_conns_[c->peer], reason);
}

void TcpTransport::Impl::CloseReceives(RecvPeer* p, const Status& reason) {
  p->closed = reason;
  for (auto& [key, r] : p->posted) Complete(std::move(r.done), reason);
  p->posted.clear();
}

// ---- Outgoing connections: connect, handshake and the send path ----------------------------

void TcpTransport::Impl::StartConnect(const std::shared_ptr<OutConn>& o) {
  o->state = OutState::kConnecting;
  o->started = clock_->Now();
  o->deadline = Deadline::After(*clock_, options_.connect_timeout);
  o->backoff = kInitialBackoff;
  o->attempts = 0;
  o->last_refused = false;
  o->refused_since.reset();
  if (OnIoThread()) return StartAttempt(o);
  // A caller's Send: resolving and connecting are the io thread's work. The post cannot be
  // refused: shutdown_ is still false under mu_.
  PostIfOpen([&] {
    return [this, o] {
      if (o->state == OutState::kConnecting && o->attempts == 0) StartAttempt(o);
    };
  });
}

void TcpTransport::Impl::StartAttempt(const std::shared_ptr<OutConn>& o) {
  const uint64_t id = ++o->attempt;
  ++o->attempts;
  Deadline attempt_deadline = o->deadline.Min(Deadline::After(*clock_, options_.handshake_timeout));
  o->timer.expires_after(attempt_deadline.Remaining(*clock_));
  o->timer.async_wait(Wrap([this, o, id](const asio::error_code& ec) {
    // Once the proof is out the attempt waits on a deadline of its own (OnChallenge); this
    // expiry may have been queued before that re-arming could cancel it.
    if (ec || o->attempt != id || o->state != OutState::kConnecting || o->proof_out == id) return;
    AttemptFailed(o, id, "no answer within the attempt deadline");
  }));
  o->resolver.async_resolve(
      o->target.host, o->target.port, tcp::resolver::numeric_service,
      Wrap([this, o, id](const asio::error_code& ec, tcp::resolver::results_type results) {
        if (o->attempt != id || o->state != OutState::kConnecting) return;
        if (ec)
          return AttemptFailed(o, id, "cannot resolve " + o->target.host + ": " + ec.message());
        std::vector<tcp::endpoint> endpoints(results.begin(), results.end());
        ConnectTo(o, id, std::move(endpoints), 0, asio::error_code());
      }));
}

// Tries endpoints[i], then the next ones, as asio::async_connect over a range does, but
// with the congestion control set between open and connect (see SetListenerControl).
void TcpTransport::Impl::ConnectTo(const std::shared_ptr<OutConn>& o, uint64_t id,
                                   std::vector<tcp::endpoint> endpoints, size_t i,
                                   asio::error_code last) {
  if (i >= endpoints.size()) {
    o->last_refused = last == asio::error::connection_refused;
    return AttemptFailed(o, id, last ? last.message() : "the address resolved to nothing",
                         last == asio::error::connection_refused);
  }
  const tcp::endpoint ep = endpoints[i];
  asio::error_code ec;
  o->socket.close(ec);
  o->socket.open(ep.protocol(), ec);
  if (ec) return ConnectTo(o, id, std::move(endpoints), i + 1, ec);
  // This host: a loopback address, or the host this rank listens on.
  const asio::ip::address own = acceptor_.local_endpoint(ec).address();
  const std::string& cc = SameHostControl(options_, !oversubscribed_);
  if (!cc.empty() && (ep.address().is_loopback() || (!ec && ep.address() == own))) {
    Status set = SetCongestionControl(o->socket.native_handle(), cc);
    LOG_IF_EVERY_N(WARNING, !set.ok(), 1000)
        << "rank " << options_.rank << ": " << set.ToString() << "; keeping the system default";
  }
  o->socket.async_connect(ep, Wrap([this, o, id, endpoints = std::move(endpoints),
                                    i](const asio::error_code& connect_ec) mutable {
                            if (o->attempt != id || o->state != OutState::kConnecting) return;
                            if (connect_ec)
                              return ConnectTo(o, id, std::move(endpoints), i + 1, connect_ec);
                            OnConnected(o, id);
                          }));
}

void TcpTransport::Impl::OnConnected(const std::shared_ptr<OutConn>& o, uint64_t id) {
  o->last_refused = false;
  SetSocketOptions(o->socket, options_, !oversubscribed_, default_cc_);
  o->connector = std::make_unique<auth::Connector>(auth::Channel::kPeer, &credentials_, o->peer);
  StatusOr<std::string> hello = o->connector->Hello();
  if (!hello.ok()) return FailOut(o, hello.status());
  o->hello = EncodeControlFrame(FrameType::kHello, *hello);
  asio::async_write(o->socket, asio::buffer(o->hello),
                    Wrap([this, o, id](const asio::error_code& ec, size_t) {
                      if (o->attempt != id || o->state != OutState::kConnecting) return;
                      if (ec) return AttemptFailed(o, id, "cannot send the hello: " + ec.message());
                      ReadHandshakeFrame(o, id, FrameType::kChallenge);
                    }));
}

void TcpTransport::Impl::ReadHandshakeFrame(const std::shared_ptr<OutConn>& o, uint64_t id,
                                            FrameType expected) {
  asio::async_read(
      o->socket, asio::buffer(o->ack_header),
      Wrap([this, o, id, expected](const asio::error_code& ec, size_t) {
        if (o->attempt != id || o->state != OutState::kConnecting) return;
        if (!ec) return OnHandshakeHeader(o, id, expected);
        if (expected == FrameType::kHelloAck) {
          // Closed right after our proof: the peer refused us and, by design, said nothing,
          // or it exited then. Trying again would be refused the same way.
          const Status refused = UnavailableError(
              "rank " + std::to_string(options_.rank) + " cannot connect to " +
              DescribePeer(o->peer) +
              ": it refused the handshake (closed the connection after the proof: another job, "
              "a different secret or a duplicate rank, and its log says which; or it exited): " +
              ec.message());
          FailOut(o, refused);
          // That connection was to carry the pair's messages both ways (this rank connects
          // up, and none came from the peer): nothing will come from it either, so its
          // receives fail now, naming why, rather than at their deadline.
          RecvPeer& p = recv_peers_[o->peer];
          if (connect_up_ && o->peer > options_.rank && !p.conn && p.closed.ok()) {
            CloseReceives(&p, refused);
          }
          return;
        }
        AttemptFailed(o, id, "no answer to the hello: " + ec.message());
      }));
}

void TcpTransport::Impl::OnHandshakeHeader(const std::shared_ptr<OutConn>& o, uint64_t id,
                                           FrameType expected) {
  FrameHeader frame;
  Status decoded =
      DecodeFrameHeader(o->ack_header.data(), FrameLimits{kMaxHandshakeMetaBytes, 0}, &frame);
  if (decoded.ok() && frame.type != expected) {
    decoded = InvalidArgumentError(std::string("answered with a ") + FrameTypeName(frame.type) +
                                   " frame where a " + FrameTypeName(expected) + " frame belongs");
  }
  if (!decoded.ok()) {
    // Something that is not a gyre peer of this version listens there; retrying won't help.
    return FailOut(o, UnavailableError("rank " + std::to_string(options_.rank) +
                                       " got a bad answer to its hello from " +
                                       DescribePeer(o->peer) + ": " + decoded.message()));
  }
  o->ack_meta.resize(frame.meta_len);
  asio::async_read(o->socket, asio::buffer(o->ack_meta),
                   Wrap([this, o, id, expected](const asio::error_code& ec, size_t) {
                     if (o->attempt != id || o->state != OutState::kConnecting) return;
                     if (ec) return AttemptFailed(o, id, "truncated answer: " + ec.message());
                     if (expected == FrameType::kChallenge) return OnChallenge(o, id);
                     OnAck(o, id);
                   }));
}

void TcpTransport::Impl::OnChallenge(const std::shared_ptr<OutConn>& o, uint64_t id) {
  StatusOr<std::string> proof =
      o->connector->Proof(std::string(o->ack_meta.begin(), o->ack_meta.end()));
  if (!proof.ok()) {
    return FailOut(o, UnavailableError("rank " + std::to_string(options_.rank) +
                                       " got a bad answer to its hello from " +
                                       DescribePeer(o->peer) + ": " + proof.status().message()));
  }
  o->hello = EncodeControlFrame(FrameType::kProof, *proof);
  asio::async_write(o->socket, asio::buffer(o->hello),
                    Wrap([this, o, id](const asio::error_code& ec, size_t) {
                      if (o->attempt != id || o->state != OutState::kConnecting) return;
                      if (ec) return AttemptFailed(o, id, "cannot send the proof: " + ec.message());
                      // The proof is out, and the peer takes the connection as this rank's the
                      // moment it checks it: from then on it refuses any other from this rank as a
                      // duplicate. So a slow answer (a loaded machine) is waited for until the
                      // connect deadline rather than given up on at the attempt's, for a new
                      // attempt that could only be refused.
                      o->proof_out = id;
                      o->timer.expires_after(o->deadline.Remaining(*clock_));
                      o->timer.async_wait(Wrap([this, o, id](const asio::error_code& timer_ec) {
                        if (timer_ec || o->attempt != id || o->state != OutState::kConnecting)
                          return;
                        AttemptFailed(o, id, "no answer to the proof by the connect deadline");
                      }));
                      ReadHandshakeFrame(o, id, FrameType::kHelloAck);
                    }));
}

void TcpTransport::Impl::OnAck(const std::shared_ptr<OutConn>& o, uint64_t id) {
  bool replies_here = false;
  Status checked =
      o->connector->CheckAck(std::string(o->ack_meta.begin(), o->ack_meta.end()), &replies_here);
  if (!checked.ok()) {
    return FailOut(o, UnavailableError(DescribePeer(o->peer) + " " + checked.message() + " (rank " +
                                       std::to_string(options_.rank) + " connecting)"));
  }
  asio::error_code ec;
  o->socket.non_blocking(true, ec);
  if (ec) return AttemptFailed(o, id, "cannot make the socket non-blocking: " + ec.message());
  o->timer.cancel();
  o->same_host = PeerOnThisHost(o->fd());
  o->state = OutState::kReady;
  cc_unsettled_ = true;
  o->connector.reset();
  o->ack_meta.clear();
  o->hello.clear();
  VLOG(1) << "rank " << options_.rank << " connected to " << DescribePeer(o->peer) << " after "
          << o->attempts << " attempt(s)" << (replies_here ? ", both ways" : "");
  if (replies_here) {
    ReadReplies(o);
  } else {
    WatchForClose(o);
  }
  PumpWrites(o);
}

void TcpTransport::Impl::Adopt(const std::shared_ptr<InConn>& c,
                               const std::shared_ptr<OutConn>& o) {
  asio::error_code ec;
  const tcp protocol = c->socket.local_endpoint(ec).protocol();
  const int fd = ec ? -1 : ::fcntl(c->socket.native_handle(), F_DUPFD_CLOEXEC, 0);
  if (fd >= 0) {
    o->socket.assign(protocol, fd, ec);
    if (ec) ::close(fd);  // not the socket's
    if (!ec) o->socket.non_blocking(true, ec);
  }
  // The peer was promised this rank's messages on this connection, so a failure here ends
  // the pair's connection for both, with the cause (out of descriptors, say) in the errors.
  auto fail = [&](const std::string& why) {
    const Status status = UnavailableError("rank " + std::to_string(options_.rank) +
                                           " cannot send on the connection from " +
                                           DescribePeer(c->peer) + ": " + why);
    FailOut(o, status);
    Drop(c, status.message());
  };
  if (fd < 0) return fail(std::strerror(errno));
  if (ec) {
    asio::error_code ignored;
    o->socket.close(ignored);
    return fail(ec.message());
  }
  SetSocketOptions(o->socket, options_, !oversubscribed_, default_cc_);
  o->shared = true;
  if (Status raw = Unregister(o); !raw.ok()) return fail(raw.message());
  o->same_host = PeerOnThisHost(o->fd());
  o->state = OutState::kReady;
  cc_unsettled_ = true;
  c->shared = true;
  VLOG(1) << "rank " << options_.rank << " sends to " << DescribePeer(c->peer)
          << " on the connection it accepted";
  PumpWrites(o);
}

void TcpTransport::Impl::ReadReplies(const std::shared_ptr<OutConn>& o) {
  RecvPeer& p = recv_peers_[o->peer];
  asio::error_code ec;
  const tcp protocol = o->socket.local_endpoint(ec).protocol();
  const tcp::endpoint remote = ec ? tcp::endpoint() : o->socket.remote_endpoint(ec);
  if (ec || p.conn || !p.closed.ok()) {
    // Cannot happen: the peer promises replies only while it has no connection to this rank.
    return FailOut(o, UnavailableError(
                          "rank " + std::to_string(options_.rank) + " cannot read replies from " +
                          DescribePeer(o->peer) +
                          (ec ? ": " + ec.message() : std::string(": already connected from it"))));
  }
  const int fd = ::fcntl(o->socket.native_handle(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    return FailOut(o, ResourceExhaustedError("rank " + std::to_string(options_.rank) +
                                             " cannot read replies from " + DescribePeer(o->peer) +
                                             ": " + std::strerror(errno)));
  }
  tcp::socket socket(io_);
  socket.assign(protocol, fd, ec);
  if (ec) {
    ::close(fd);  // not the socket's
  } else {
    socket.non_blocking(true, ec);
  }
  if (ec) {
    asio::error_code ignored;
    socket.close(ignored);
    return FailOut(
        o, UnavailableError("rank " + std::to_string(options_.rank) + " cannot read replies from " +
                            DescribePeer(o->peer) + ": " + ec.message()));
  }
  auto c = std::make_shared<InConn>(std::move(socket), io_);
  c->remote = FormatEndpoint(remote);
  c->peer = o->peer;
  c->handshake_done = true;
  c->shared = true;
  o->shared = true;
  in_conns_.insert(c);
  p.conn = c;
  if (Status raw = Unregister(o); !raw.ok()) return FailOut(o, raw);
  OnReadable(c);
}

Status TcpTransport::Impl::Unregister(const std::shared_ptr<OutConn>& o) {
  asio::error_code ec;
  const tcp protocol = o->socket.local_endpoint(ec).protocol();
  const int fd = ec ? -1 : o->socket.release(ec);
  if (ec) {
    return UnavailableError("rank " + std::to_string(options_.rank) +
                            " cannot use its connection to " + DescribePeer(o->peer) + ": " +
                            ec.message());
  }
  o->protocol = protocol;
  o->raw_fd = fd;
  return Status::Ok();
}

size_t TcpTransport::Impl::WriteGathered(OutConn& o, asio::error_code& ec) {
  if (o.raw_fd < 0) return o.socket.write_some(gather_, ec);
  std::array<iovec, kMaxGatherBuffers> iov;
  for (size_t i = 0; i < gather_.size(); ++i) {
    iov[i].iov_base = const_cast<void*>(gather_[i].data());
    iov[i].iov_len = gather_[i].size();
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = gather_.size();
  for (;;) {
    const ssize_t n = ::sendmsg(o.raw_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EINTR) continue;
    ec = asio::error_code(errno, asio::error::get_system_category());
    return 0;
  }
}

void TcpTransport::Impl::AttemptFailed(const std::shared_ptr<OutConn>& o, uint64_t id,
                                       const std::string& error, bool refused) {
  if (o->attempt != id || o->state != OutState::kConnecting) return;
  if (!refused) {
    o->refused_since.reset();
  } else if (!o->refused_since) {
    o->refused_since = o->attempts == 1 ? o->started : clock_->Now();
  }
  const uint64_t next = ++o->attempt;  // whatever of this attempt is still in flight is stale
  asio::error_code ignored;
  o->resolver.cancel();
  o->socket.close(ignored);
  o->last_error = error;
  Duration left = o->deadline.Remaining(*clock_);
  // A rank listens before it publishes its address, so a port that has refused every connect
  // for refused_timeout has no rank behind it any more: it exited or closed its
  // communicator. Waiting out connect_timeout would only delay the error.
  const Duration refused_for = o->refused_since ? clock_->Now() - *o->refused_since : Duration{0};
  const bool nothing_listens = o->refused_since && refused_for >= options_.refused_timeout;
  if (left <= Duration::zero() || nothing_listens) {
    if (!o->last_refused && std::none_of(o->queue.begin(), o->queue.end(), [](const SendOp& op) {
          return static_cast<bool>(op.done);
        })) {
      // The connection SetPeers began ahead of any call, and no send waits for it: a peer
      // that did not answer then (stopped, or paging for seconds, just after joining) may well
      // answer now. The pair goes back to idle, and the first send to the peer connects afresh
      // under its call's deadline, rather than every later call failing at once on this old
      // attempt. Not when its port refused the last attempt: nothing listens there, the peer
      // is gone, and the sends to come fail at once, naming it.
      VLOG(1) << "rank " << options_.rank << ": no connection to " << DescribePeer(o->peer)
              << " after " << FormatDuration(clock_->Now() - o->started)
              << " with nothing to send; the next send connects again (last error: " << error
              << ")";
      o->queue.clear();
      o->state = OutState::kIdle;
      return;
    }
    const Status gave_up = UnavailableError(
        "rank " + std::to_string(options_.rank) + " cannot connect to " + DescribePeer(o->peer) +
        ": gave up after " + FormatDuration(clock_->Now() - o->started) + " of connect_timeout " +
        FormatDuration(options_.connect_timeout) + " (" + std::to_string(o->attempts) +
        " attempts); " +
        (nothing_listens ? "every connect was refused for " + FormatDuration(refused_for) +
                               ": nothing listens at its address, so it has exited or closed "
                               "its communicator"
                         : "last error: " + error));
    FailOut(o, gave_up);
    // Refused to the end: nothing listens at the peer's address, so it is gone, and nothing
    // will come from it on any connection but one it made already.
    RecvPeer& p = recv_peers_[o->peer];
    if (o->last_refused && !p.conn && p.closed.ok()) CloseReceives(&p, gave_up);
    return;
  }
  // The last attempt is made right at the deadline rather than giving up early.
  o->timer.expires_after(std::min(left, o->backoff));
  o->backoff = std::min<Duration>(o->backoff * 2, kMaxBackoff);
  o->timer.async_wait(Wrap([this, o, next](const asio::error_code& ec) {
    if (ec || o->attempt != next || o->state != OutState::kConnecting) return;
    StartAttempt(o);
  }));
}

// The peer never writes on this connection after its answer, so readability means it closed
// (or broke the protocol). Watching makes a dead peer visible before the next Send.
void TcpTransport::Impl::WatchForClose(const std::shared_ptr<OutConn>& o) {
  o->socket.async_wait(
      tcp::socket::wait_read, Wrap([this, o](const asio::error_code& ec) {
        if (o->state != OutState::kReady || ec == asio::error::operation_aborted) return;
        asio::error_code read_ec = ec;
        if (std::optional<std::string> goodbye = GoodbyeOn(o)) {
          return FailOut(o, UnavailableError(*goodbye));
        }
        if (!read_ec) {
          o->socket.read_some(asio::buffer(o->probe), read_ec);
          if (WouldBlock(read_ec)) return WatchForClose(o);
        }
        FailOut(o, UnavailableError("connection to " + DescribePeer(o->peer) + " closed: " +
                                    (read_ec ? read_ec.message()
                                             : std::string("the peer sent unexpected bytes"))));
      }));
}

// Writes with non-blocking write_some (gathering headers and payloads of queued frames, no
// payload copy); no write is ever left pending on a caller's buffer, which is what lets
// CancelOperation release that buffer at once.
void TcpTransport::Impl::PumpWrites(const std::shared_ptr<OutConn>& o) {
  if (o->state != OutState::kReady || o->write_waiting) return;
  size_t turn_left = kIoTurnBytes;
  while (!o->queue.empty()) {
    gather_.clear();
    // On a shared connection the peer's data may arrive while this rank writes, and the
    // kernel holds the socket's lock for a whole write: what arrives meanwhile waits in the
    // socket's backlog and is processed at the end of the write, on this rank's CPU, so
    // long writes stall the other direction. While this rank waits for a message from the
    // peer, writes of at most kSharedWriteBytes keep both flowing (2 ranks, 16 MiB ring
    // allreduce: 1.14x the time of a connection each way with whole-message writes,
    // 1.01-1.04x with 256 KiB writes); a one-way stream keeps whole-message writes.
    size_t budget =
        o->shared && AwaitingFrom(o->peer) ? kSharedWriteBytes : std::numeric_limits<size_t>::max();
    for (const SendOp& op : o->queue) {
      if (gather_.size() + 2 > kMaxGatherBuffers || budget == 0) break;
      if (op.sent < kFrameHeaderBytes) {
        gather_.emplace_back(op.header.data() + op.sent, kFrameHeaderBytes - op.sent);
      }
      size_t payload_sent = op.sent > kFrameHeaderBytes ? op.sent - kFrameHeaderBytes : 0;
      if (payload_sent < op.bytes) {
        const size_t take = std::min(op.bytes - payload_sent, budget);
        gather_.emplace_back(op.PayloadAt(payload_sent), take);
        budget -= take;
      }
    }
    asio::error_code ec;
    size_t n = WriteGathered(*o, ec);
    if (WouldBlock(ec)) return ArmWritable(o);
    if (ec) return WriteFailed(o, ec);
    if (n > 0) bytes_sent_[o->peer].fetch_add(n, std::memory_order_relaxed);
    size_t left = n;
    while (left > 0) {
      SendOp& op = o->queue.front();
      size_t take = std::min(left, kFrameHeaderBytes + op.bytes - op.sent);
      CountSeqBytes(sent_by_seq_.get(), &sent_slot_next_, o->peer, op.seq, take);
      op.sent += take;
      left -= take;
      if (op.sent == kFrameHeaderBytes + op.bytes) {
        Complete(std::move(op.done), Status::Ok());
        o->queue.pop_front();
      }
    }
    if (n >= turn_left) return ArmWritable(o);
    turn_left -= n;
  }
}

void TcpTransport::Impl::ArmWritable(const std::shared_ptr<OutConn>& o) {
  if (OnDriverThread()) {
    o->driver_write = true;
    return;
  }
  if (OnIoThread()) return WaitWritable(o);
  // A caller's Send without the lease filled the socket: the io thread writes the rest.
  o->write_waiting = true;
  PostIfOpen([&] {
    return [this, o] {
      o->write_waiting = false;
      PumpWrites(o);
    };
  });
}

void TcpTransport::Impl::WaitWritable(const std::shared_ptr<OutConn>& o) {
  if (o->raw_fd >= 0) {
    asio::error_code ec;
    o->socket.assign(o->protocol, o->raw_fd, ec);
    if (ec) {
      return FailOut(o, UnavailableError("rank " + std::to_string(options_.rank) +
                                         " cannot wait to write to " + DescribePeer(o->peer) +
                                         ": " + ec.message()));
    }
    o->raw_fd = -1;
  }
  o->write_waiting = true;
  o->socket.async_wait(tcp::socket::wait_write, Wrap([this, o](const asio::error_code& ec) {
                         o->write_waiting = false;
                         if (o->shared && o->socket.is_open()) {
                           if (Status raw = Unregister(o); !raw.ok()) return FailOut(o, raw);
                         }
                         if (o->state != OutState::kReady || ec == asio::error::operation_aborted)
                           return;
                         if (ec) return WriteFailed(o, ec);
                         PumpWrites(o);
                       }));
}

std::optional<std::string> TcpTransport::Impl::GoodbyeOn(const std::shared_ptr<OutConn>& o) {
  std::array<uint8_t, kFrameHeaderBytes + kMaxGoodbyeBytes> bytes;
  size_t have = 0;
  int fd = o->fd();
  if (o->shared) {
    const std::shared_ptr<InConn>& c = recv_peers_[o->peer].conn;
    if (!c || c->closed || c->phase != ReadPhase::kHeader || c->header_got != 0) {
      return std::nullopt;
    }
    have = std::min(c->stage_end - c->stage_begin, bytes.size());
    if (have > 0) std::memcpy(bytes.data(), c->stage.get() + c->stage_begin, have);
    fd = c->fd();
  }
  if (have < bytes.size() && fd >= 0) {
    const ssize_t got =
        ::recv(fd, bytes.data() + have, bytes.size() - have, MSG_PEEK | MSG_DONTWAIT);
    if (got > 0) have += static_cast<size_t>(got);
  }
  return DecodeGoodbye(bytes.data(), have);
}

void TcpTransport::Impl::WriteFailed(const std::shared_ptr<OutConn>& o,
                                     const asio::error_code& ec) {
  std::optional<std::string> goodbye = GoodbyeOn(o);
  if (!goodbye) {
    return FailOut(
        o, UnavailableError("write to " + DescribePeer(o->peer) + " failed: " + ec.message()));
  }
  const Status reason = UnavailableError(*goodbye);
  // (FailOut logs it, once: a failed write always has sends lost.)
  // On a shared connection nothing more will come either: the receives fail with it too.
  // (CloseIn resets the peer's conn: it gets a copy.)
  if (o->shared) {
    if (const std::shared_ptr<InConn> c = recv_peers_[o->peer].conn) CloseIn(c, reason);
  }
  FailOut(o, reason);
}

void TcpTransport::Impl::FailOut(const std::shared_ptr<OutConn>& o, const Status& status) {
  if (o->state == OutState::kFailed) return;
  if (!shutdown_) {
    // A peer closing an idle connection is how every job ends; only lost sends are news.
    bool sends_lost = std::any_of(o->queue.begin(), o->queue.end(),
                                  [](const SendOp& op) { return static_cast<bool>(op.done); });
    LOG_IF(WARNING, sends_lost) << "rank " << options_.rank << ": " << status.message();
    VLOG_IF(1, !sends_lost) << "rank " << options_.rank << ": " << status.message();
  }
  o->state = OutState::kFailed;
  o->failure = status;
  ++o->attempt;
  asio::error_code ignored;
  o->timer.cancel();
  o->resolver.cancel();
  if (o->shared) {
    const int fd = o->raw_fd >= 0 ? o->raw_fd : o->socket.release(ignored);
    o->raw_fd = -1;
    if (fd >= 0) {
      // Closing a socket with unread bytes resets it, which throws away what this rank
      // sent and the peer has not read yet: on an orderly shutdown (the reading side is
      // closed already, nothing waits for them) the bytes that came are read first.
      if (shutdown_) {
        for (int i = 0; i < 64; ++i) {
          if (::recv(fd, discard_.get(), kDiscardBufferBytes, MSG_DONTWAIT) <= 0) break;
        }
      }
      // The reading side holds another descriptor: shutting the socket down ends its
      // reads too, and the peer sees the close.
      ::shutdown(fd, SHUT_RDWR);
      ::close(fd);
    }
  }
  o->socket.close(ignored);
  for (SendOp& op : o->queue) Complete(std::move(op.done), status);
  o->queue.clear();
}

// ---- TcpTransport ---------------------------------------------------------------------------

StatusOr<std::unique_ptr<TcpTransport>> TcpTransport::Create(const TcpTransportOptions& options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return InvalidArgumentError("rank " + std::to_string(options.rank) + " is not in a world of " +
                                std::to_string(options.world_size));
  }
  if (options.job_id.empty()) return InvalidArgumentError("TcpTransport needs a job_id");
  if (options.listen_port < 0 || options.listen_port > 65535) {
    return InvalidArgumentError("listen_port " + std::to_string(options.listen_port) +
                                " is out of range");
  }
  if (options.connect_timeout <= Duration::zero() ||
      options.handshake_timeout <= Duration::zero()) {
    return InvalidArgumentError("connect_timeout and handshake_timeout must be positive");
  }
  if (options.max_frame_bytes == 0) return InvalidArgumentError("max_frame_bytes must be > 0");
  if (options.max_unauthenticated_connections < 1) {
    return InvalidArgumentError("max_unauthenticated_connections must be at least 1");
  }
  if (options.job_id.size() > auth::kMaxJobIdBytes) {
    return InvalidArgumentError("job_id of " + std::to_string(options.job_id.size()) +
                                " bytes is longer than " + std::to_string(auth::kMaxJobIdBytes));
  }
  auto impl = std::make_unique<Impl>(options);
  GYRE_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<TcpTransport>(new TcpTransport(std::move(impl)));
}

TcpTransport::TcpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpTransport::~TcpTransport() = default;

std::string TcpTransport::address() const { return impl_->address(); }
Status TcpTransport::SetPeers(std::vector<std::string> addresses) {
  return impl_->SetPeers(std::move(addresses));
}
int TcpTransport::rank() const { return impl_->rank(); }
int TcpTransport::size() const { return impl_->size(); }
const Clock& TcpTransport::clock() const { return impl_->clock(); }
void TcpTransport::Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
                        DoneCallback done) {
  impl_->Send(peer, header, data, bytes, std::move(done));
}
void TcpTransport::Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
                        DoneCallback done) {
  impl_->Recv(peer, header, data, bytes, std::move(done));
}
void TcpTransport::CancelOperation(uint64_t seq, const Status& reason) {
  impl_->CancelOperation(seq, reason);
}
uint64_t TcpTransport::BytesReceivedFrom(int peer) const { return impl_->BytesReceivedFrom(peer); }
uint64_t TcpTransport::BytesSentTo(int peer) const { return impl_->BytesSentTo(peer); }
uint64_t TcpTransport::BytesReceivedFrom(int peer, uint64_t seq) const {
  return peer < 0 || peer >= size() ? 0 : impl_->BytesReceivedFrom(peer, seq);
}
uint64_t TcpTransport::BytesSentTo(int peer, uint64_t seq) const {
  return peer < 0 || peer >= size() ? 0 : impl_->BytesSentTo(peer, seq);
}
std::optional<StaleMessage> TcpTransport::TakeStale(uint64_t seq) { return impl_->TakeStale(seq); }
std::optional<Exhaustion> TcpTransport::LastExhaustion() const { return impl_->LastExhaustion(); }
bool TcpTransport::AcquireDriver(size_t max_message_bytes) {
  return impl_->AcquireDriver(max_message_bytes);
}
void TcpTransport::ReleaseDriver() { impl_->ReleaseDriver(); }
void TcpTransport::Drive(TimePoint until) { impl_->Drive(until); }
void TcpTransport::Wake() { impl_->Wake(); }
const auth::RefusalCounters& TcpTransport::refusals() const { return impl_->refusals(); }
BufferPoolStats TcpTransport::early_buffers() const { return impl_->early_buffers(); }
std::string TcpTransport::DescribePeer(int peer) const { return impl_->DescribePeer(peer); }
void TcpTransport::ExpectSend(size_t bytes) { impl_->ExpectSend(bytes); }
void TcpTransport::Shutdown() { impl_->Shutdown(); }

}  // namespace gyre
