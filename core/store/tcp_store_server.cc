#include "core/store/tcp_store_server.h"

#include <glog/logging.h>

#include <asio.hpp>
#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/auth/handshake_queue.h"
#include "core/base/log_budget.h"
#include "core/base/thread.h"
#include "core/store/hash_store.h"
#include "core/store/store_internal.h"
#include "core/store/store_wire.h"

namespace gyre::store {
namespace {

using asio::ip::tcp;
using internal::CallTimer;

// Bodies are read in chunks so a peer that announces a large frame and sends little costs
// only what it actually sent.
constexpr size_t kBodyChunkBytes = size_t{1} << 20;
// After a failed accept (out of descriptors, say) the server listens again only after this
// pause: an error that persists would otherwise fail every retry at once, a busy loop.
constexpr auto kAcceptRetryDelay = std::chrono::milliseconds(100);

std::string EndpointText(const tcp::endpoint& endpoint) {
  const asio::ip::address& addr = endpoint.address();
  std::string host = addr.is_v6() ? "[" + addr.to_string() + "]" : addr.to_string();
  return host + ":" + std::to_string(endpoint.port());
}

// One client connection. Owned by the server's connection table; handlers hold a
// shared_ptr so the object outlives its last callback. Touched only on the io thread.
struct Connection {
  Connection(uint64_t id_in, tcp::socket socket_in)
      : id(id_in),
        socket(std::move(socket_in)),
        frame_timer(socket.get_executor()),
        park_timer(socket.get_executor()),
        handshake_timer(socket.get_executor()) {}

  const uint64_t id;
  tcp::socket socket;
  std::string peer;
  asio::steady_timer frame_timer;
  asio::steady_timer park_timer;
  asio::steady_timer handshake_timer;
  bool closed = false;

  // Until `authenticated`, frames are handshake messages and nothing else is served.
  std::unique_ptr<auth::Acceptor> acceptor;
  bool authenticated = false;
  std::string challenge_out;

  unsigned char header[internal::kFrameHeaderBytes] = {};
  uint32_t frame_length = 0;
  std::string body;  // sized ahead of the read in progress
  size_t body_received = 0;
  uint64_t frame_seq = 0;  // which frame the frame timer is guarding
  bool in_frame = false;

  // A request is being served: parked, or its response is being written.
  bool busy = false;
  // A request that arrived while the previous response was still being written.
  std::optional<proto::StoreRequest> held;

  bool parked = false;
  uint64_t park_generation = 0;
  proto::StoreRequest parked_request;
  std::string parked_key;  // the key whose write wakes this request
  int wait_index = 0;      // Wait: keys before this one have been seen
  std::optional<CallTimer> parked_timer;

  std::string out;
};

using ConnectionPtr = std::shared_ptr<Connection>;

}  // namespace

TcpStoreServer::Options::Options() : max_frame_bytes(internal::kMaxFrameBytes) {}

class TcpStoreServer::Impl {
 public:
  explicit Impl(const Options& options)
      : options_(options), acceptor_(io_), accept_retry_timer_(io_) {
    credentials_.secret = options.secret;
    credentials_.job_id = options.job_id;
  }

  Status Listen(const std::string& host, int port);
  Status Run() {
    return StartThread(&thread_, "store server on " + address_, "its network I/O",
                       [this] { io_.run(); });
  }
  void Stop();

  int port() const { return port_; }
  const std::string& address() const { return address_; }
  int64_t dropped() const { return dropped_.load(); }
  const auth::RefusalCounters& refusals() const { return refusals_; }

 private:
  void Accept();
  void ReadHeader(const ConnectionPtr& c);
  void ReadBody(const ConnectionPtr& c);
  void OnRequest(const ConnectionPtr& c, proto::StoreRequest request);
  void Serve(const ConnectionPtr& c, const proto::StoreRequest& request);
  void Write(const ConnectionPtr& c, const proto::StoreResponse& response);
  void AfterWrite(const ConnectionPtr& c, const asio::error_code& ec);
  void OnHandshakeMessage(const ConnectionPtr& c, const std::string& message);
  void Close(const ConnectionPtr& c);
  void Drop(const ConnectionPtr& c, const std::string& reason);
  // Closes a connection that has not authenticated, without telling it why.
  void Refuse(const ConnectionPtr& c, auth::Refusal refusal, const std::string& reason);
  // The log line of a refusal, within refusal_log_'s budget (anyone who can reach the port
  // can cause one).
  void LogRefusal(const std::string& what, auth::Refusal refusal);

  // Answers `request` at once, or parks it and returns nullopt.
  std::optional<proto::StoreResponse> Handle(const ConnectionPtr& c,
                                             const proto::StoreRequest& request);
  // Re-examines a parked request; answers it when its keys are all there.
  void Recheck(const ConnectionPtr& c);
  void ParkOn(const ConnectionPtr& c, const std::string& key);
  void Unpark(const ConnectionPtr& c, const proto::StoreResponse& response);
  void OnParkTimeout(const ConnectionPtr& c, uint64_t generation);
  void OnKeyWritten(const std::string& key);
  void RemoveWaiter(const ConnectionPtr& c);

  const Options options_;
  auth::Credentials credentials_;  // rank kNoRank, world size not checked
  auth::ReplayGuard replay_guard_;
  auth::RefusalCounters refusals_;
  static constexpr int kRefusalLinesPerMinute = 20;
  LogBudget refusal_log_{kRefusalLinesPerMinute, Seconds(60)};
  // The ids of the connections still in the handshake, oldest first.
  auth::HandshakeQueue<uint64_t> handshaking_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_timer_;
  std::thread thread_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<HashStore> store_;
  std::atomic<int64_t> dropped_{0};
  bool stopping_ = false;
  uint64_t next_connection_id_ = 1;
  std::unordered_map<uint64_t, ConnectionPtr> connections_;
  // Parked requests by the one key they wait for next.
  std::unordered_map<std::string, std::vector<ConnectionPtr>> waiters_;
};

Status TcpStoreServer::Impl::Listen(const std::string& host, int port) {
  if (port < 0 || port > 65535) {
    return InvalidArgumentError("store server: port " + std::to_string(port) +
                                " is not in 0..65535");
  }
  if (host.empty()) {
    return InvalidArgumentError(
        "store server: no host to listen on (127.0.0.1 for local jobs; 0.0.0.0 must be "
        "asked for explicitly)");
  }
  asio::error_code ec;
  asio::ip::address addr = asio::ip::make_address(host, ec);
  if (ec) {
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      return InvalidArgumentError("store server: cannot resolve host '" + host +
                                  "': " + (ec ? ec.message() : std::string("no address")));
    }
    addr = results.begin()->endpoint().address();
  }
  tcp::endpoint endpoint(addr, static_cast<uint16_t>(port));
  const std::string target = host + ":" + std::to_string(port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return UnavailableError("store server: cannot listen on " + target + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  address_ = EndpointText(acceptor_.local_endpoint());
  store_ = std::make_unique<HashStore>("tcp://" + address_);
  Accept();
  LOG(INFO) << "store server listening on " << address_;
  LOG_IF(WARNING, addr.is_unspecified())
      << "store server " << address_ << " listens on every interface, as asked (" << host << ")";
  LOG_IF(WARNING, options_.secret.empty())
      << "store server " << address_
      << " has no secret: any process that can reach it can read and write every key";
  return Status::Ok();
}

void TcpStoreServer::Impl::Stop() {
  if (!thread_.joinable()) return;
  CHECK(thread_.get_id() != std::this_thread::get_id())
      << "TcpStoreServer::Stop called from its own io thread";
  asio::post(io_, [this] {
    stopping_ = true;
    asio::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_timer_.cancel();
    std::vector<ConnectionPtr> all;
    for (auto& [id, c] : connections_) all.push_back(c);
    for (const ConnectionPtr& c : all) Close(c);
    waiters_.clear();
  });
  thread_.join();
  LOG(INFO) << "store server on " << address_ << " stopped";
}

void TcpStoreServer::Impl::Accept() {
  acceptor_.async_accept([this](const asio::error_code& ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Usually EMFILE or a connection reset before accept; keep listening, after a pause.
      LOG(WARNING)
          << "store server " << address_ << ": accept failed: " << ec.message()
          << "; accepting again in "
          << std::chrono::duration_cast<std::chrono::milliseconds>(kAcceptRetryDelay).count()
          << " ms";
      accept_retry_timer_.expires_after(kAcceptRetryDelay);
      accept_retry_timer_.async_wait([this](const asio::error_code& timer_ec) {
        if (!timer_ec && !stopping_) Accept();
      });
      return;
    }
    asio::error_code ignored;
    tcp::endpoint remote = socket.remote_endpoint(ignored);
    if (static_cast<int>(connections_.size()) >= options_.max_connections) {
      LOG(WARNING) << "store server " << address_ << ": refusing connection from "
                   << EndpointText(remote) << ": already " << connections_.size()
                   << " connections, the cap of " << options_.max_connections << " ("
                   << options_.max_connections_hint << ")";
      dropped_.fetch_add(1);
      socket.close(ignored);
      Accept();
      return;
    }
    // At the cap of connections in the handshake, the one that has waited longest there is
    // cut off rather than the newcomer: a real client proves itself in milliseconds, so
    // strangers holding idle connections (no secret needed) cannot lock the job's ranks out.
    const bool room = handshaking_.MakeRoom(
        static_cast<size_t>(std::max(options_.max_unauthenticated, 0)),
        [&](uint64_t oldest, size_t waiting) {
          // Every connection in the queue is live: Close takes it off.
          auto it = connections_.find(oldest);
          CHECK(it != connections_.end()) << "connection " << oldest << " queued after it closed";
          Refuse(it->second, auth::Refusal::kOverCap,
                 "the longest waiting of " + std::to_string(waiting) +
                     " connections in the handshake (the cap), cut off for a newcomer");
        });
    if (!room) {
      LogRefusal("refusing connection from " + EndpointText(remote) + ": already " +
                     std::to_string(handshaking_.size()) +
                     " connections in the handshake (the cap)",
                 auth::Refusal::kOverCap);
      refusals_.Count(auth::Refusal::kOverCap);
      dropped_.fetch_add(1);
      socket.close(ignored);
      Accept();
      return;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    auto c = std::make_shared<Connection>(next_connection_id_++, std::move(socket));
    c->peer = EndpointText(remote);
    c->acceptor =
        std::make_unique<auth::Acceptor>(auth::Channel::kStore, &credentials_, &replay_guard_);
    handshaking_.Add(c->id);
    connections_[c->id] = c;
    VLOG(1) << "store server " << address_ << ": connection from " << c->peer;
    c->handshake_timer.expires_after(options_.handshake_timeout);
    c->handshake_timer.async_wait([this, c](const asio::error_code& timer_ec) {
      if (timer_ec || c->closed || c->authenticated) return;
      Refuse(c, auth::Refusal::kTimeout,
             "no complete handshake within " + FormatDuration(options_.handshake_timeout));
    });
    ReadHeader(c);
    Accept();
  });
}

void TcpStoreServer::Impl::ReadHeader(const ConnectionPtr& c) {
  asio::async_read(
      c->socket, asio::buffer(c->header, sizeof(c->header)),
      [this, c](const asio::error_code& ec, size_t n) {
        if (c->closed) return;
        if (ec && !c->authenticated) {
          // Closed or reset between two messages: the connector left (a launcher checking
          // that the store answers, a client that gave up, a port scan), not garbage.
          const bool between =
              n == 0 && (ec == asio::error::eof || ec == asio::error::connection_reset);
          Refuse(c, between ? auth::Refusal::kAbandoned : auth::Refusal::kMalformed,
                 "closed during the handshake after " + std::to_string(n) +
                     " header bytes: " + ec.message());
          return;
        }
        if (ec) {
          if (ec == asio::error::eof && n == 0) {
            VLOG(1) << "store server " << address_ << ": " << c->peer << " disconnected"
                    << (c->parked ? " while its request was parked" : "");
            Close(c);
          } else if (ec == asio::error::eof) {
            Drop(c, "connection closed after " + std::to_string(n) + " of 4 header bytes");
          } else {
            LOG(INFO) << "store server " << address_ << ": connection from " << c->peer
                      << " failed: " << ec.message();
            Close(c);
          }
          return;
        }
        c->frame_length = internal::DecodeFrameLength(c->header);
        const size_t cap =
            c->authenticated ? options_.max_frame_bytes : auth::kMaxHandshakeMessageBytes;
        if (c->frame_length > cap) {
          std::string why = std::string(c->authenticated ? "" : "handshake ") + "frame length " +
                            std::to_string(c->frame_length) + " exceeds the cap of " +
                            std::to_string(cap) + " bytes";
          if (!c->authenticated) return Refuse(c, auth::Refusal::kMalformed, why);
          Drop(c, why);
          return;
        }
        c->body.clear();
        c->in_frame = true;
        const uint64_t seq = ++c->frame_seq;
        c->frame_timer.expires_after(options_.frame_timeout);
        c->frame_timer.async_wait([this, c, seq](const asio::error_code& timer_ec) {
          // The frame may have completed just as the timer fired.
          if (timer_ec || c->closed || !c->in_frame || c->frame_seq != seq) return;
          Drop(c, "frame of " + std::to_string(c->frame_length) + " bytes incomplete after " +
                      FormatDuration(options_.frame_timeout) + " (" +
                      std::to_string(c->body_received) + " body bytes received)");
        });
        ReadBody(c);
      });
}

void TcpStoreServer::Impl::ReadBody(const ConnectionPtr& c) {
  size_t have = c->body.size();
  c->body_received = have;
  if (have == c->frame_length) {
    c->in_frame = false;
    c->frame_timer.cancel();
    if (!c->authenticated) {
      std::string message;
      message.swap(c->body);
      OnHandshakeMessage(c, message);
      return;
    }
    proto::StoreRequest request;
    if (!request.ParseFromArray(c->body.data(), static_cast<int>(c->body.size()))) {
      Drop(c, "unparsable request of " + std::to_string(c->frame_length) + " bytes");
      return;
    }
    std::string().swap(c->body);
    OnRequest(c, std::move(request));
    return;
  }
  size_t chunk = std::min(kBodyChunkBytes, c->frame_length - have);
  c->body.resize(have + chunk);
  asio::async_read(
      c->socket, asio::buffer(&c->body[have], chunk),
      [this, c, have](const asio::error_code& ec, size_t n) {
        if (c->closed) return;
        if (ec && !c->authenticated) {
          Refuse(c, auth::Refusal::kMalformed, "truncated handshake message: " + ec.message());
          return;
        }
        if (ec) {
          Drop(c, "truncated frame: " + std::to_string(have + n) + " of " +
                      std::to_string(c->frame_length) + " body bytes before: " + ec.message());
          return;
        }
        ReadBody(c);
      });
}

void TcpStoreServer::Impl::OnRequest(const ConnectionPtr& c, proto::StoreRequest request) {
  if (c->parked) {
    Drop(c, "sent a request while its previous one was still pending");
    return;
  }
  if (c->busy) {
    // Our client sends the next request as soon as it has read the previous response,
    // which may be before the write's completion handler has run here.
    c->held = std::move(request);
    return;
  }
  Serve(c, request);
  // Keep reading: that is how a client that goes away while parked is noticed.
  if (!c->closed) ReadHeader(c);
}

void TcpStoreServer::Impl::Serve(const ConnectionPtr& c, const proto::StoreRequest& request) {
  c->busy = true;
  std::optional<proto::StoreResponse> response = Handle(c, request);
  if (response.has_value()) Write(c, *response);
}

void TcpStoreServer::Impl::Write(const ConnectionPtr& c, const proto::StoreResponse& response) {
  if (!internal::EncodeFrame(response, &c->out)) {
    proto::StoreResponse too_big;
    too_big.set_request_id(response.request_id());
    internal::SetResponseStatus(
        InternalError("store server " + address_ + ": response does not fit in a frame"), &too_big);
    CHECK(internal::EncodeFrame(too_big, &c->out));
  }
  asio::async_write(c->socket, asio::buffer(c->out),
                    [this, c](const asio::error_code& ec, size_t) { AfterWrite(c, ec); });
}

void TcpStoreServer::Impl::AfterWrite(const ConnectionPtr& c, const asio::error_code& ec) {
  if (c->closed) return;
  if (ec) {
    LOG(INFO) << "store server " << address_ << ": writing to " << c->peer
              << " failed: " << ec.message();
    Close(c);
    return;
  }
  std::string().swap(c->out);
  c->busy = false;
  if (c->held.has_value()) {
    proto::StoreRequest next = std::move(*c->held);
    c->held.reset();
    Serve(c, next);
    if (!c->closed) ReadHeader(c);
  }
}

void TcpStoreServer::Impl::OnHandshakeMessage(const ConnectionPtr& c, const std::string& message) {
  auth::Acceptor& acceptor = *c->acceptor;
  auto frame = [](const std::string& bytes) {
    std::string out(internal::kFrameHeaderBytes, '\0');
    internal::EncodeFrameLength(static_cast<uint32_t>(bytes.size()),
                                reinterpret_cast<unsigned char*>(&out[0]));
    return out + bytes;
  };
  if (c->challenge_out.empty()) {
    StatusOr<std::string> challenge = acceptor.Challenge(message);
    if (!challenge.ok()) return Refuse(c, acceptor.refusal(), challenge.status().message());
    c->challenge_out = frame(*challenge);
    asio::async_write(
        c->socket, asio::buffer(c->challenge_out), [this, c](const asio::error_code& ec, size_t) {
          if (ec && !c->closed) {
            Refuse(c, auth::Refusal::kMalformed, "cannot send the challenge: " + ec.message());
          }
        });
    ReadHeader(c);
    return;
  }
  Status proof = acceptor.CheckProof(message);
  if (!proof.ok()) return Refuse(c, acceptor.refusal(), proof.message());
  c->authenticated = true;
  handshaking_.Remove(c->id);
  c->handshake_timer.cancel();
  VLOG(1) << "store server " << address_ << ": " << c->peer << " authenticated as rank "
          << acceptor.peer_rank() << " of job " << acceptor.peer_job_id();
  // Answered like a response, so a first request that arrives before this write has
  // finished waits for it (see OnRequest).
  c->busy = true;
  c->out = frame(acceptor.Accept());
  c->acceptor.reset();
  asio::async_write(c->socket, asio::buffer(c->out),
                    [this, c](const asio::error_code& ec, size_t) { AfterWrite(c, ec); });
  ReadHeader(c);
}

void TcpStoreServer::Impl::Close(const ConnectionPtr& c) {
  if (c->closed) return;
  c->closed = true;
  if (!c->authenticated) handshaking_.Remove(c->id);
  if (c->parked) RemoveWaiter(c);
  c->parked = false;
  asio::error_code ignored;
  c->frame_timer.cancel();
  c->park_timer.cancel();
  c->handshake_timer.cancel();
  c->socket.shutdown(tcp::socket::shutdown_both, ignored);
  c->socket.close(ignored);
  connections_.erase(c->id);
}

void TcpStoreServer::Impl::Refuse(const ConnectionPtr& c, auth::Refusal refusal,
                                  const std::string& reason) {
  if (c->closed) return;
  LogRefusal("refused the connection from " + c->peer + ": " + reason, refusal);
  refusals_.Count(refusal);
  dropped_.fetch_add(1);
  Close(c);
}

void TcpStoreServer::Impl::LogRefusal(const std::string& what, auth::Refusal refusal) {
  int64_t held_back = 0;
  if (!refusal_log_.Allow(SteadyClock::Get()->Now(), &held_back)) return;
  (refusal == auth::Refusal::kAbandoned ? LOG(INFO) : LOG(WARNING))
      << "store server " << address_ << ": " << what << " [" << auth::RefusalName(refusal) << "]"
      << refusal_log_.HeldBackNote(held_back);
}

void TcpStoreServer::Impl::Drop(const ConnectionPtr& c, const std::string& reason) {
  LOG(WARNING) << "store server " << address_ << ": dropping connection from " << c->peer << ": "
               << reason;
  dropped_.fetch_add(1);
  Close(c);
}

std::optional<proto::StoreResponse> TcpStoreServer::Impl::Handle(
    const ConnectionPtr& c, const proto::StoreRequest& request) {
  proto::StoreResponse response;
  response.set_request_id(request.request_id());
  const Deadline now = Deadline::Infinite();  // HashStore's non-waiting calls never block
  const std::string where = "tcp://" + address_;
  auto fail = [&](const Status& status) {
    internal::SetResponseStatus(status, &response);
    return response;
  };
  Status valid = internal::CheckRequest(request, where);
  if (!valid.ok()) return fail(valid);
  switch (request.op()) {
    case proto::STORE_OP_SET: {
      Status status = store_->Set(request.keys(0), request.value(), now);
      if (!status.ok()) return fail(status);
      OnKeyWritten(request.keys(0));
      return response;
    }
    case proto::STORE_OP_TRY_GET:
    case proto::STORE_OP_GET: {
      StatusOr<std::optional<std::string>> value = store_->TryGet(request.keys(0), now);
      if (!value.ok()) return fail(value.status());
      if (value->has_value()) {
        response.set_found(true);
        response.set_value(std::move(**value));
        return response;
      }
      if (request.op() == proto::STORE_OP_TRY_GET) return response;
      break;  // park below
    }
    case proto::STORE_OP_ADD: {
      StatusOr<int64_t> result = store_->Add(request.keys(0), request.delta(), now);
      if (!result.ok()) return fail(result.status());
      response.set_number(*result);
      OnKeyWritten(request.keys(0));
      return response;
    }
    case proto::STORE_OP_COMPARE_SET: {
      StatusOr<std::string> result =
          store_->CompareSet(request.keys(0), request.expected(), request.value(), now);
      if (!result.ok()) return fail(result.status());
      // A failed comparison changes nothing, so it wakes nobody; waking anyway is harmless.
      response.set_value(std::move(*result));
      OnKeyWritten(request.keys(0));
      return response;
    }
    case proto::STORE_OP_WAIT: {
      int first_missing = 0;
      while (first_missing < request.keys_size() && store_->Contains(request.keys(first_missing))) {
        ++first_missing;
      }
      if (first_missing == request.keys_size()) return response;
      c->wait_index = first_missing;
      break;  // park below
    }
    case proto::STORE_OP_TRY_GET_MANY: {
      // As many of the keys, in order, as fit one response (always the first): a value is at
      // most kMaxValueBytes, and so is what one response carries beyond the first.
      size_t bytes = 0;
      for (const std::string& key : request.keys()) {
        StatusOr<std::optional<std::string>> value = store_->TryGet(key, now);
        if (!value.ok()) return fail(value.status());
        const size_t size = value->has_value() ? (*value)->size() : 0;
        if (response.found_each_size() > 0 && bytes + size > kMaxValueBytes) break;
        bytes += size;
        response.add_found_each(value->has_value());
        response.add_values(value->has_value() ? std::move(**value) : std::string());
      }
      return response;
    }
    case proto::STORE_OP_DELETE: {
      Status status = store_->Delete(request.keys(0), now);
      if (!status.ok()) return fail(status);
      return response;
    }
    default:
      return fail(InvalidArgumentError(where + ": unknown store op " +
                                       std::to_string(static_cast<int>(request.op()))));
  }

  // A Get or Wait whose key(s) are not there yet: park it. Limits beyond kMaxParkMillis
  // (about 11 days) are treated as none, which also keeps the arithmetic from overflowing.
  constexpr int64_t kMaxParkMillis = int64_t{1000} * 1000 * 1000;
  const bool unlimited = request.deadline_ms() < 0 || request.deadline_ms() > kMaxParkMillis;
  Deadline deadline = unlimited
                          ? Deadline::Infinite()
                          : Deadline::After(*SteadyClock::Get(), Millis(request.deadline_ms()));
  c->parked = true;
  c->park_generation++;
  c->parked_request = request;
  c->parked_timer.emplace(deadline);
  if (!unlimited) {
    uint64_t generation = c->park_generation;
    c->park_timer.expires_after(Millis(request.deadline_ms()));
    c->park_timer.async_wait([this, c, generation](const asio::error_code& ec) {
      if (ec || c->closed) return;
      OnParkTimeout(c, generation);
    });
  }
  Recheck(c);
  return std::nullopt;
}

void TcpStoreServer::Impl::Recheck(const ConnectionPtr& c) {
  const proto::StoreRequest& request = c->parked_request;
  proto::StoreResponse response;
  response.set_request_id(request.request_id());
  if (request.op() == proto::STORE_OP_GET) {
    StatusOr<std::optional<std::string>> value =
        // bounded: TryGet on the in-memory store never waits.
        store_->TryGet(request.keys(0), Deadline::Infinite());
    if (value.ok() && !value->has_value()) {
      ParkOn(c, request.keys(0));
      return;
    }
    if (!value.ok()) {
      internal::SetResponseStatus(value.status(), &response);
    } else {
      response.set_found(true);
      response.set_value(std::move(**value));
    }
    Unpark(c, response);
    return;
  }
  // Keys before wait_index were present when last looked at; like FileStore, Wait counts a
  // key seen once as present, which keeps a wait for n keys O(n) over all its wake-ups.
  while (c->wait_index < request.keys_size() && store_->Contains(request.keys(c->wait_index))) {
    ++c->wait_index;
  }
  if (c->wait_index < request.keys_size()) {
    ParkOn(c, request.keys(c->wait_index));
    return;
  }
  Unpark(c, response);
}

void TcpStoreServer::Impl::ParkOn(const ConnectionPtr& c, const std::string& key) {
  c->parked_key = key;
  waiters_[key].push_back(c);
}

void TcpStoreServer::Impl::RemoveWaiter(const ConnectionPtr& c) {
  auto it = waiters_.find(c->parked_key);
  if (it == waiters_.end()) return;
  std::vector<ConnectionPtr>& list = it->second;
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == c) {
      list.erase(list.begin() + static_cast<std::ptrdiff_t>(i));
      break;
    }
  }
  if (list.empty()) waiters_.erase(it);
}

void TcpStoreServer::Impl::Unpark(const ConnectionPtr& c, const proto::StoreResponse& response) {
  c->parked = false;
  c->park_timer.cancel();
  c->parked_timer.reset();
  Write(c, response);
}

void TcpStoreServer::Impl::OnParkTimeout(const ConnectionPtr& c, uint64_t generation) {
  if (!c->parked || c->park_generation != generation) return;
  RemoveWaiter(c);
  const proto::StoreRequest& request = c->parked_request;
  const std::string where = "tcp://" + address_;
  Status status;
  if (request.op() == proto::STORE_OP_GET) {
    status = internal::KeyNotSetError(where, "Get", request.keys(0), *c->parked_timer);
  } else {
    std::vector<std::string> missing;
    for (const std::string& key : request.keys()) {
      if (!store_->Contains(key)) missing.push_back(key);
    }
    status = internal::KeysMissingError(where, missing, request.keys_size(), *c->parked_timer);
  }
  proto::StoreResponse response;
  response.set_request_id(request.request_id());
  internal::SetResponseStatus(status, &response);
  Unpark(c, response);
}

void TcpStoreServer::Impl::OnKeyWritten(const std::string& key) {
  if (options_.on_write) options_.on_write(key);
  auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  std::vector<ConnectionPtr> woken = std::move(it->second);
  waiters_.erase(it);
  for (const ConnectionPtr& c : woken) {
    if (c->closed || !c->parked) continue;
    Recheck(c);
  }
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

TcpStoreServer::~TcpStoreServer() { Stop(); }

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port) {
  return Start(host, port, Options());
}

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(const std::string& host, int port,
                                                                const Options& options) {
  if (options.max_connections < 1) {
    return InvalidArgumentError("store server on " + host + ":" + std::to_string(port) +
                                ": max_connections must be at least 1, not " +
                                std::to_string(options.max_connections));
  }
  auto impl = std::make_unique<Impl>(options);
  GYRE_RETURN_IF_ERROR(impl->Listen(host, port));
  GYRE_RETURN_IF_ERROR(impl->Run());
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

void TcpStoreServer::Stop() { impl_->Stop(); }
int TcpStoreServer::port() const { return impl_->port(); }
std::string TcpStoreServer::address() const { return impl_->address(); }
std::string TcpStoreServer::url() const { return "tcp://" + impl_->address(); }
int64_t TcpStoreServer::dropped_connections() const { return impl_->dropped(); }
const auth::RefusalCounters& TcpStoreServer::refusals() const { return impl_->refusals(); }

}  // namespace gyre::store
