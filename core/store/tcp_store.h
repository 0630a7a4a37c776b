// TcpStore: the Store client of a TcpStoreServer. One TCP connection, one request in flight
// at a time: calls from many threads are serialised, so a Get or Wait that waits holds up
// the other threads' calls (give each blocking thread its own TcpStore). Every call is
// bounded by its deadline on the client side, so a server that stops answering gives
// DeadlineExceeded, never a hang. Every connection, and every reconnection, starts with the
// authenticated handshake of core/auth/handshake.h.
#pragma once

#include <memory>
#include <string>

#include "core/auth/handshake.h"
#include "core/store/store.h"

namespace gyre::store {

// How TcpStore::Connect reports a store it cannot reach yet (refused, timed out, a host name
// that does not resolve: all may pass while the store starts): a WARNING line after
// `first_report`, then one every `report_every`, until it connects or gives up.
struct TcpStoreConnectOptions {
  Duration first_report = Seconds(5);
  Duration report_every = Seconds(10);
};

class TcpStore final : public Store {
 public:
  // Connects to host:port and proves `credentials` (secret, job id, rank), retrying with
  // capped exponential backoff while nothing listens yet (a server that starts later is
  // fine). DeadlineExceeded, with the last connect error, when no connection is made by
  // `deadline`; Unavailable at once when the server refuses the handshake (a different
  // secret or job: trying again would be refused the same way), or when what answers is no
  // gyre store (another service on that port: the error shows the start of its answer).
  // While it retries it says so on the log now and then (see TcpStoreConnectOptions).
  static StatusOr<std::unique_ptr<TcpStore>> Connect(
      const std::string& host, int port, Deadline deadline,
      const auth::Credentials& credentials = auth::Credentials(),
      const TcpStoreConnectOptions& options = TcpStoreConnectOptions());
  ~TcpStore() override;

  // Errors: Unavailable naming host:port when the server is gone (refused, reset, EOF);
  // DeadlineExceeded when no answer arrives by the deadline. After either, the next call
  // makes one fresh connection attempt. A request is never re-sent automatically, so an Add
  // that failed with Unavailable may or may not have been applied.
  Status Set(const std::string& key, const std::string& value, Deadline deadline) override;
  StatusOr<std::string> Get(const std::string& key, Deadline deadline) override;
  StatusOr<std::optional<std::string>> TryGet(const std::string& key, Deadline deadline) override;
  StatusOr<std::vector<std::optional<std::string>>> TryGetMany(const std::vector<std::string>& keys,
                                                               Deadline deadline) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) override;
  StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                   const std::string& desired, Deadline deadline) override;
  Status Wait(const std::vector<std::string>& keys, Deadline deadline) override;
  Status Delete(const std::string& key, Deadline deadline) override;
  std::string Describe() const override;

 private:
  class Impl;
  explicit TcpStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gyre::store
