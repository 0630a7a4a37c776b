#include "core/store/tcp_store.h"

#include <asio.hpp>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <vector>

#include "core/store/store_internal.h"
#include "core/store/store_wire.h"
#include "glog/logging.h"

namespace gyre::store {
namespace {

using asio::ip::tcp;
using internal::CallTimer;

// The state of one asynchronous exchange. Handlers share it, so a handler that runs after
// its call gave up (deadline) touches only this orphan, never the caller's stack.
struct Exchange {
  bool done = false;
  asio::error_code ec;
  const char* stage = "";
  std::string out;
  unsigned char header[internal::kFrameHeaderBytes] = {};
  uint32_t length = 0;
  bool too_long = false;
  size_t header_got = 0;  // bytes of the header read, when it was cut off
  std::string in;
  size_t in_got = 0;  // bytes of the body read, when it was cut off
  std::vector<tcp::endpoint> endpoints;
};

}  // namespace

class TcpStore::Impl {
 public:
  Impl(std::string host, int port, const auth::Credentials& credentials)
      : host_(std::move(host)),
        port_(port),
        credentials_(credentials),
        socket_(io_),
        resolver_(io_) {}

  std::string url() const {
    bool v6 = host_.find(':') != std::string::npos;
    return "tcp://" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
  }

  Status ConnectWithRetry(Deadline deadline, const TcpStoreConnectOptions& options);
  StatusOr<proto::StoreResponse> Call(proto::StoreRequest* request, Deadline deadline);

  // Set once the server has refused TRY_GET_MANY as an unknown op (a server from before it):
  // from then on the keys are read one TryGet each, as that server understands.
  std::atomic<bool> no_try_get_many{false};

 private:
  // `*refused` is set when the server turned down the handshake; retrying is pointless.
  Status ConnectOnce(Deadline deadline, bool* refused = nullptr);
  Status Handshake(Deadline deadline, bool* refused);
  // Writes one frame holding `out`, then reads one of at most kMaxHandshakeMessageBytes.
  // `*foreign` is set when the peer answered bytes that cannot be a gyre store's (a frame
  // over the handshake cap, or one cut off by the peer closing): a different service.
  Status HandshakeExchange(const std::string& out, std::string* in, Deadline deadline,
                           bool* foreign);
  // "tcp://h:p answered "HTTP/1.1 400 Bad Request": not a gyre store server (<why>)"
  Status NotAGyreStore(const std::string& answer, const std::string& why) const;
  // Runs io_ until `ex.done` or the deadline; false when the deadline came first.
  bool RunUntil(const Exchange& ex, Deadline deadline);
  void CloseSocket();
  std::string Describe(const proto::StoreRequest& request) const;
  // `message` without the "tcp://h:p: " this client's errors start with.
  std::string WithoutUrl(const std::string& message) const;

  // While ConnectWithRetry runs: when its next "still trying" line is due, and what it says.
  struct Progress {
    TimePoint start;
    TimePoint next;
    Duration every;
    Deadline deadline = Deadline::Infinite();
    std::string last_error;  // of the last attempt that failed
    const char* stage = "";  // of the attempt under way
  };
  // Logs the line when it is due (RunUntil wakes for it, as do the pauses between attempts).
  void ReportIfDue();
  Progress* progress_ = nullptr;

  const std::string host_;
  const int port_;
  const auth::Credentials credentials_;
  std::mutex mu_;
  asio::io_context io_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  std::vector<tcp::endpoint> endpoints_;
  bool connected_ = false;
  // Bumped whenever the socket is closed, so late handlers of an abandoned exchange do not
  // start new operations on a fresh connection.
  uint64_t generation_ = 0;
  uint64_t next_request_id_ = 1;
};

bool TcpStore::Impl::RunUntil(const Exchange& ex, Deadline deadline) {
  io_.restart();
  while (!ex.done) {
    // A progress line due before the deadline wakes the loop to be logged.
    const bool report =
        progress_ != nullptr && (deadline.infinite() || progress_->next < deadline.when());
    size_t ran = report                ? io_.run_one_until(progress_->next)
                 : deadline.infinite() ? io_.run_one()
                                       : io_.run_one_until(deadline.when());
    if (ex.done) break;
    if (ran == 0) {
      if (report && SteadyClock::Get()->Now() >= progress_->next) {
        ReportIfDue();
        continue;
      }
      return false;  // the deadline passed (or, impossibly, no work was left)
    }
  }
  return true;
}

namespace {

// Whole seconds, rounded: "5 s".
std::string WholeSeconds(Duration d) {
  return std::to_string(std::llround(std::chrono::duration<double>(d).count())) + " s";
}

}  // namespace

void TcpStore::Impl::ReportIfDue() {
  const TimePoint now = SteadyClock::Get()->Now();
  if (progress_ == nullptr || now < progress_->next) return;
  const Progress& p = *progress_;
  // Within moments of the end the error says it all.
  if (!p.deadline.infinite() && p.deadline.Remaining(*SteadyClock::Get()) < Millis(500)) {
    while (progress_->next <= now) progress_->next += p.every;
    return;
  }
  const std::string why = p.last_error.empty() ? std::string(p.stage) + ", no answer yet"
                                               : "last error: " + p.last_error;
  const std::string left =
      p.deadline.infinite()
          ? std::string("no deadline")
          : "giving up in " + WholeSeconds(p.deadline.Remaining(*SteadyClock::Get()));
  LOG(WARNING) << "still trying to reach the store at " << url() << " (for "
               << WholeSeconds(now - p.start) << "; " << why << "); " << left;
  while (progress_->next <= now) progress_->next += p.every;
}

std::string TcpStore::Impl::WithoutUrl(const std::string& message) const {
  const std::string prefix = url() + ": ";
  return message.compare(0, prefix.size(), prefix) == 0 ? message.substr(prefix.size()) : message;
}

void TcpStore::Impl::CloseSocket() {
  asio::error_code ignored;
  socket_.close(ignored);
  resolver_.cancel();
  connected_ = false;
  ++generation_;
}

Status TcpStore::Impl::ConnectOnce(Deadline deadline, bool* refused) {
  CloseSocket();
  const uint64_t generation = generation_;
  if (endpoints_.empty()) {
    asio::error_code ec;
    asio::ip::address addr = asio::ip::make_address(host_, ec);
    if (!ec) {
      endpoints_.emplace_back(addr, static_cast<uint16_t>(port_));
    } else {
      if (progress_ != nullptr) progress_->stage = "resolving the host name";
      auto ex = std::make_shared<Exchange>();
      resolver_.async_resolve(host_, std::to_string(port_),
                              [ex](const asio::error_code& rec, tcp::resolver::results_type r) {
                                ex->ec = rec;
                                for (const auto& entry : r) ex->endpoints.push_back(entry);
                                ex->done = true;
                              });
      if (!RunUntil(*ex, deadline)) {
        CloseSocket();
        return DeadlineExceededError(url() + ": resolving '" + host_ + "' timed out");
      }
      if (ex->ec || ex->endpoints.empty()) {
        return UnavailableError(url() + ": cannot resolve '" + host_ +
                                "': " + (ex->ec ? ex->ec.message() : std::string("no address")));
      }
      endpoints_ = ex->endpoints;
    }
  }
  if (progress_ != nullptr) progress_->stage = "connecting";
  auto ex = std::make_shared<Exchange>();
  asio::async_connect(socket_, endpoints_, [ex](const asio::error_code& ec, const tcp::endpoint&) {
    ex->ec = ec;
    ex->done = true;
  });
  if (!RunUntil(*ex, deadline)) {
    CloseSocket();
    return DeadlineExceededError(url() + ": connect timed out");
  }
  if (ex->ec || generation != generation_) {
    CloseSocket();
    return UnavailableError(url() + ": connect failed: " + ex->ec.message());
  }
  asio::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  if (progress_ != nullptr) progress_->stage = "connected, waiting for the handshake's answer";
  bool turned_down = false;
  Status shook = Handshake(deadline, &turned_down);
  if (refused != nullptr) *refused = turned_down;
  if (!shook.ok()) {
    CloseSocket();
    return shook;
  }
  connected_ = true;
  return Status::Ok();
}

Status TcpStore::Impl::HandshakeExchange(const std::string& out, std::string* in, Deadline deadline,
                                         bool* foreign) {
  auto ex = std::make_shared<Exchange>();
  ex->out.assign(internal::kFrameHeaderBytes, '\0');
  internal::EncodeFrameLength(static_cast<uint32_t>(out.size()),
                              reinterpret_cast<unsigned char*>(&ex->out[0]));
  ex->out += out;
  const uint64_t generation = generation_;
  asio::async_write(
      socket_, asio::buffer(ex->out), [this, ex, generation](const asio::error_code& ec, size_t) {
        if (ec || generation != generation_) {
          ex->ec = ec ? ec : asio::error::operation_aborted;
          ex->done = true;
          return;
        }
        asio::async_read(socket_, asio::buffer(ex->header),
                         [this, ex, generation](const asio::error_code& ec, size_t got) {
                           if (ec || generation != generation_) {
                             ex->ec = ec ? ec : asio::error::operation_aborted;
                             ex->header_got = got;
                             ex->done = true;
                             return;
                           }
                           ex->length = internal::DecodeFrameLength(ex->header);
                           if (ex->length > auth::kMaxHandshakeMessageBytes) {
                             ex->too_long = true;
                             ex->done = true;
                             return;
                           }
                           ex->in.resize(ex->length);
                           asio::async_read(socket_, asio::buffer(ex->in),
                                            [ex](const asio::error_code& ec, size_t got) {
                                              ex->ec = ec;
                                              ex->in_got = got;
                                              ex->done = true;
                                            });
                         });
      });
  if (!RunUntil(*ex, deadline)) {
    CloseSocket();
    return DeadlineExceededError(url() + ": no answer in the handshake");
  }
  const std::string header(reinterpret_cast<const char*>(ex->header), sizeof(ex->header));
  if (ex->too_long) {
    // The rest of the answer (an HTTP status line, an SSH banner) names the service: what
    // has come, or comes within a moment, is shown.
    auto more = std::make_shared<Exchange>();
    more->in.resize(60);
    socket_.async_read_some(asio::buffer(more->in), [more](const asio::error_code& ec, size_t got) {
      more->ec = ec;
      more->in_got = got;
      more->done = true;
    });
    const Deadline soon = Deadline::After(*SteadyClock::Get(), Millis(200));
    RunUntil(*more, deadline.Min(soon));
    CloseSocket();
    *foreign = true;
    return NotAGyreStore(header + more->in.substr(0, more->in_got),
                         "its first 4 bytes, read as a gyre frame length, announce " +
                             std::to_string(ex->length) + " bytes");
  }
  if (ex->ec) {
    // Bytes and then the end of the connection: no gyre store cuts off its own answer (one
    // that turns a connection away closes it before answering anything).
    const bool ended = ex->ec == asio::error::eof || ex->ec == asio::error::connection_reset;
    if (ended && (ex->header_got > 0 || ex->length > 0)) {
      *foreign = true;
      return NotAGyreStore(header.substr(0, ex->header_got ? ex->header_got : header.size()) +
                               ex->in.substr(0, ex->in_got),
                           "it closed the connection in the middle of its answer");
    }
    if (ex->ec == asio::error::eof) {
      return UnavailableError(url() +
                              ": the server closed the connection in the handshake without an "
                              "answer (a gyre store at its connection cap, or one of another "
                              "protocol version, does so; its log says which)");
    }
    return UnavailableError(url() + ": connection lost in the handshake: " + ex->ec.message());
  }
  *in = std::move(ex->in);
  return Status::Ok();
}

namespace {

// The first line of `bytes` (an HTTP status line, an SSH banner), as Printable shows text
// from outside: unprintable bytes as \xNN, at most 64 of them.
std::string PrintablePrefix(const std::string& bytes) {
  const size_t start = bytes.find_first_not_of("\r\n");
  if (start == std::string::npos) return "";
  const size_t end = bytes.find_first_of("\r\n", start);
  return Printable(bytes.substr(start, end == std::string::npos ? end : end - start));
}

}  // namespace

Status TcpStore::Impl::NotAGyreStore(const std::string& answer, const std::string& why) const {
  return UnavailableError(url() + " answered \"" + PrintablePrefix(answer) +
                          "\": not a gyre store server (" + why +
                          "); is the address that of gyrerun's store or of gyre-store?");
}

Status TcpStore::Impl::Handshake(Deadline deadline, bool* refused) {
  auth::Connector connector(auth::Channel::kStore, &credentials_, auth::kNoRank);
  GYRE_ASSIGN_OR_RETURN(std::string hello, connector.Hello());
  std::string challenge;
  Status asked = HandshakeExchange(hello, &challenge, deadline, refused);
  if (!asked.ok()) return asked;
  StatusOr<std::string> proof = connector.Proof(challenge);
  if (!proof.ok()) {
    *refused = true;
    unsigned char header[internal::kFrameHeaderBytes];
    internal::EncodeFrameLength(static_cast<uint32_t>(challenge.size()), header);
    return NotAGyreStore(
        std::string(reinterpret_cast<const char*>(header), sizeof(header)) + challenge,
        proof.status().message());
  }
  std::string ack;
  bool foreign = false;
  Status answered = HandshakeExchange(*proof, &ack, deadline, &foreign);
  if (foreign) {
    *refused = true;
    return answered;
  }
  if (answered.code() == StatusCode::kUnavailable) {
    *refused = true;
    return UnavailableError(url() +
                            ": the store server refused the handshake (it closed the connection "
                            "after the proof: a different secret, another job id, or a replay; "
                            "its log says which). A gyre-store started without --secret_file "
                            "has no secret, and gyrerun makes one for every job unless given "
                            "--secret_file: give both the same file");
  }
  GYRE_RETURN_IF_ERROR(answered);
  Status checked = connector.CheckAck(ack);
  if (!checked.ok()) {
    *refused = true;
    return UnavailableError(url() + ": the store server " + checked.message());
  }
  return Status::Ok();
}

Status TcpStore::Impl::ConnectWithRetry(Deadline deadline, const TcpStoreConnectOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  CallTimer timer(deadline);
  internal::Backoff backoff(Millis(5), Millis(250));
  Progress progress;
  progress.start = SteadyClock::Get()->Now();
  progress.next = progress.start + options.first_report;
  progress.every = std::max<Duration>(options.report_every, Millis(10));
  progress.deadline = deadline;
  progress_ = &progress;
  struct Clear {
    Progress** p;
    ~Clear() { *p = nullptr; }
  } clear{&progress_};
  int attempts = 0;
  Status last;
  while (true) {
    ++attempts;
    bool refused = false;
    Status attempt = ConnectOnce(deadline, &refused);
    if (attempt.ok() || refused) return attempt;
    // An attempt cut short by the deadline says less than the refusal before it.
    if (last.ok() || attempt.code() != StatusCode::kDeadlineExceeded) last = attempt;
    progress.last_error = WithoutUrl(last.message());
    if (!backoff.SleepWithin(deadline)) break;
    ReportIfDue();
  }
  return DeadlineExceededError("TcpStore: could not connect to " + url() + " " + timer.AfterText() +
                               ", " + std::to_string(attempts) +
                               " attempts; last error: " + WithoutUrl(last.message()));
}

std::string TcpStore::Impl::Describe(const proto::StoreRequest& request) const {
  std::string text = internal::StoreOpName(request.op());
  if (request.op() == proto::STORE_OP_WAIT) {
    std::vector<std::string> keys(request.keys().begin(), request.keys().end());
    return text + " for " + internal::FormatKeyList(keys, 3);
  }
  return text + " of key " + (request.keys_size() > 0 ? QuoteKey(request.keys(0)) : "''");
}

StatusOr<proto::StoreResponse> TcpStore::Impl::Call(proto::StoreRequest* request,
                                                    Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  CallTimer timer(deadline);
  const Duration remaining = deadline.Remaining(*SteadyClock::Get());
  if (remaining <= Duration::zero()) {
    return DeadlineExceededError(url() + ": " + Describe(*request) +
                                 ": the deadline passed before the request was sent");
  }
  if (!connected_) {
    Status status = ConnectOnce(deadline);
    if (!status.ok()) {
      if (status.code() == StatusCode::kDeadlineExceeded) {
        return DeadlineExceededError(status.message() + " during " + Describe(*request) + " " +
                                     timer.AfterText());
      }
      return UnavailableError("store " + url() + " is unreachable for " + Describe(*request) +
                              ": " + status.message());
    }
  }
  request->set_request_id(next_request_id_++);
  if (deadline.infinite()) {
    request->set_deadline_ms(-1);
  } else {
    // The server gives up slightly before we do, so its more precise answer (which keys are
    // missing) normally wins the race against our local deadline.
    Duration margin = std::min<Duration>(remaining / 20, Millis(50));
    request->set_deadline_ms(
        std::chrono::duration_cast<std::chrono::milliseconds>(remaining - margin).count());
  }
  // And its answer, due at the server's deadline, is waited for a little past ours: a quarter
  // of the wait, kept within 10-100 ms. On a loaded machine it came 4-11 ms after a 100 ms
  // deadline, and "no answer to Wait for 'a', 'present', 'b'" lost which keys were missing.
  const Deadline answer_by =
      deadline.infinite()
          ? deadline
          : Deadline::At(deadline.when() +
                         std::clamp<Duration>(remaining / 4, Millis(10), Millis(100)));
  auto ex = std::make_shared<Exchange>();
  if (!internal::EncodeFrame(*request, &ex->out)) {
    return InvalidArgumentError(url() + ": " + Describe(*request) + ": the request is " +
                                std::to_string(request->ByteSizeLong()) +
                                " bytes, more than a frame can carry (" +
                                std::to_string(internal::kMaxFrameBytes) + ")");
  }
  const uint64_t generation = generation_;
  asio::async_write(socket_, asio::buffer(ex->out),
                    [this, ex, generation](const asio::error_code& ec, size_t) {
                      if (ec || generation != generation_) {
                        ex->ec = ec ? ec : asio::error::operation_aborted;
                        ex->stage = "sending the request";
                        ex->done = true;
                        return;
                      }
                      asio::async_read(socket_, asio::buffer(ex->header),
                                       [this, ex, generation](const asio::error_code& ec, size_t) {
                                         if (ec || generation != generation_) {
                                           ex->ec = ec ? ec : asio::error::operation_aborted;
                                           ex->stage = "reading the response header";
                                           ex->done = true;
                                           return;
                                         }
                                         ex->length = internal::DecodeFrameLength(ex->header);
                                         if (ex->length > internal::kMaxFrameBytes) {
                                           ex->too_long = true;
                                           ex->done = true;
                                           return;
                                         }
                                         ex->in.resize(ex->length);
                                         asio::async_read(socket_, asio::buffer(ex->in),
                                                          [ex](const asio::error_code& ec, size_t) {
                                                            ex->ec = ec;
                                                            ex->stage = "reading the response body";
                                                            ex->done = true;
                                                          });
                                       });
                    });
  if (!RunUntil(*ex, answer_by)) {
    CloseSocket();
    return DeadlineExceededError(url() + ": no answer to " + Describe(*request) + " " +
                                 timer.AfterText());
  }
  if (ex->ec) {
    CloseSocket();
    return UnavailableError(url() + ": connection lost during " + Describe(*request) + " (" +
                            ex->stage + "): " + ex->ec.message());
  }
  if (ex->too_long) {
    CloseSocket();
    return InternalError(url() + ": response to " + Describe(*request) + " announces " +
                         std::to_string(ex->length) + " bytes, over the frame cap");
  }
  proto::StoreResponse response;
  if (!response.ParseFromString(ex->in)) {
    CloseSocket();
    return InternalError(url() + ": unparsable response to " + Describe(*request));
  }
  if (response.request_id() != request->request_id()) {
    CloseSocket();
    return InternalError(url() + ": response to request " + std::to_string(response.request_id()) +
                         " while waiting for " + std::to_string(request->request_id()));
  }
  return response;
}

TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStore::~TcpStore() = default;

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const std::string& host, int port,
                                                      Deadline deadline,
                                                      const auth::Credentials& credentials,
                                                      const TcpStoreConnectOptions& options) {
  if (host.empty()) return InvalidArgumentError("TcpStore: empty host");
  if (port <= 0 || port > 65535) {
    return InvalidArgumentError("TcpStore: port " + std::to_string(port) + " for host '" + host +
                                "' is not in 1..65535");
  }
  if (credentials.job_id.size() > auth::kMaxJobIdBytes) {
    return InvalidArgumentError("TcpStore: job id of " + std::to_string(credentials.job_id.size()) +
                                " bytes is longer than " + std::to_string(auth::kMaxJobIdBytes));
  }
  auto impl = std::make_unique<Impl>(host, port, credentials);
  GYRE_RETURN_IF_ERROR(impl->ConnectWithRetry(deadline, options));
  return std::unique_ptr<TcpStore>(new TcpStore(std::move(impl)));
}

std::string TcpStore::Describe() const { return impl_->url(); }

namespace {

proto::StoreRequest MakeRequest(proto::StoreOp op, const std::string& key) {
  proto::StoreRequest request;
  request.set_op(op);
  request.add_keys(key);
  return request;
}

// A request of many keys (Wait, TryGetMany) names keys[first, end): at most kMaxWaitKeys of
// them and about 1 MiB (at least one key), so a large world's keys, or long ones, never make
// a frame over the cap.
proto::StoreRequest ManyKeysRequest(proto::StoreOp op, const std::vector<std::string>& keys,
                                    size_t first) {
  constexpr size_t kRequestKeyBytes = size_t{1} << 20;
  proto::StoreRequest request;
  request.set_op(op);
  size_t bytes = 0;
  for (size_t i = first;
       i < keys.size() && static_cast<size_t>(request.keys_size()) < internal::kMaxWaitKeys &&
       (request.keys_size() == 0 || bytes + keys[i].size() <= kRequestKeyBytes);
       ++i) {
    request.add_keys(keys[i]);
    bytes += keys[i].size();
  }
  return request;
}

}  // namespace

Status TcpStore::Set(const std::string& key, const std::string& value, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(key, value));
  proto::StoreRequest request = MakeRequest(proto::STORE_OP_SET, key);
  request.set_value(value);
  GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
  return internal::ResponseStatus(response);
}

StatusOr<std::string> TcpStore::Get(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  proto::StoreRequest request = MakeRequest(proto::STORE_OP_GET, key);
  GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
  GYRE_RETURN_IF_ERROR(internal::ResponseStatus(response));
  return std::move(*response.mutable_value());
}

StatusOr<std::optional<std::string>> TcpStore::TryGet(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  proto::StoreRequest request = MakeRequest(proto::STORE_OP_TRY_GET, key);
  GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
  GYRE_RETURN_IF_ERROR(internal::ResponseStatus(response));
  if (!response.found()) return std::optional<std::string>();
  return std::optional<std::string>(std::move(*response.mutable_value()));
}

StatusOr<std::vector<std::optional<std::string>>> TcpStore::TryGetMany(
    const std::vector<std::string>& keys, Deadline deadline) {
  for (const std::string& key : keys) GYRE_RETURN_IF_ERROR(CheckKey(key));
  if (impl_->no_try_get_many) return Store::TryGetMany(keys, deadline);
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  // The server answers as many of a request's keys as fit one response; the rest are asked
  // for again.
  while (values.size() < keys.size()) {
    proto::StoreRequest request =
        ManyKeysRequest(proto::STORE_OP_TRY_GET_MANY, keys, values.size());
    GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
    const Status answered_status = internal::ResponseStatus(response);
    if (answered_status.code() == StatusCode::kInvalidArgument &&
        answered_status.message().find("unknown store op") != std::string::npos) {
      impl_->no_try_get_many = true;
      GYRE_ASSIGN_OR_RETURN(
          std::vector<std::optional<std::string>> rest,
          Store::TryGetMany({keys.begin() + values.size(), keys.end()}, deadline));
      for (auto& value : rest) values.push_back(std::move(value));
      return values;
    }
    GYRE_RETURN_IF_ERROR(answered_status);
    const int answered = response.found_each_size();
    if (answered < 1 || answered > request.keys_size() || response.values_size() != answered) {
      return InternalError(Describe() + ": TryGetMany of " + std::to_string(request.keys_size()) +
                           " keys was answered for " + std::to_string(answered) + " keys with " +
                           std::to_string(response.values_size()) + " values");
    }
    for (int i = 0; i < answered; ++i) {
      if (response.found_each(i)) {
        values.emplace_back(std::move(*response.mutable_values(i)));
      } else {
        values.emplace_back();
      }
    }
  }
  return values;
}

StatusOr<int64_t> TcpStore::Add(const std::string& key, int64_t delta, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  proto::StoreRequest request = MakeRequest(proto::STORE_OP_ADD, key);
  request.set_delta(delta);
  GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
  GYRE_RETURN_IF_ERROR(internal::ResponseStatus(response));
  return static_cast<int64_t>(response.number());
}

StatusOr<std::string> TcpStore::CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  GYRE_RETURN_IF_ERROR(CheckValue(key, desired));
  proto::StoreRequest request = MakeRequest(proto::STORE_OP_COMPARE_SET, key);
  request.set_expected(expected);
  request.set_value(desired);
  GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
  GYRE_RETURN_IF_ERROR(internal::ResponseStatus(response));
  return std::move(*response.mutable_value());
}

Status TcpStore::Wait(const std::vector<std::string>& keys, Deadline deadline) {
  for (const std::string& key : keys) GYRE_RETURN_IF_ERROR(CheckKey(key));
  // More keys than one request may name are waited for a request at a time, all by the one
  // deadline; a part that times out lists what it still misses.
  for (size_t first = 0; first < keys.size();) {
    proto::StoreRequest request = ManyKeysRequest(proto::STORE_OP_WAIT, keys, first);
    first += static_cast<size_t>(request.keys_size());
    GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
    GYRE_RETURN_IF_ERROR(internal::ResponseStatus(response));
  }
  return Status::Ok();
}

Status TcpStore::Delete(const std::string& key, Deadline deadline) {
  GYRE_RETURN_IF_ERROR(CheckKey(key));
  proto::StoreRequest request = MakeRequest(proto::STORE_OP_DELETE, key);
  GYRE_ASSIGN_OR_RETURN(proto::StoreResponse response, impl_->Call(&request, deadline));
  return internal::ResponseStatus(response);
}

}  // namespace gyre::store
