// The rendezvous Store: a small key/value service that ranks use to find each other before
// any data socket exists. Every call is bounded by a Deadline; blocking calls (Get, Wait)
// wait for keys to appear and fail with DeadlineExceeded naming the key and elapsed time.
// Implementations: HashStore (in-memory), FileStore (shared folder), TcpStore (client of a
// TcpStoreServer), PrefixStore (namespacing wrapper).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/auth/handshake.h"
#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::store {

// Caps shared by every back end, so a key or value accepted by one is accepted by all.
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;

// Keys and values are arbitrary byte strings; keys must be non-empty.
//
// Thread-safety: every implementation is safe to call from many threads at once.
// Deadlines are absolute points on the steady clock (SteadyClock).
class Store {
 public:
  virtual ~Store() = default;

  // Stores `value` under `key`, replacing any previous value.
  virtual Status Set(const std::string& key, const std::string& value, Deadline deadline) = 0;

  // Waits until `key` exists and returns its value. DeadlineExceeded names the key and the
  // time waited.
  virtual StatusOr<std::string> Get(const std::string& key, Deadline deadline) = 0;

  // Returns the value, or nullopt when `key` does not exist; never waits for the key.
  virtual StatusOr<std::optional<std::string>> TryGet(const std::string& key,
                                                      Deadline deadline) = 0;

  // Atomically adds `delta` to the decimal integer stored under `key` (a missing key counts
  // as 0) and returns the new value. A value that is not a decimal int64, or an overflow,
  // is InvalidArgument.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta, Deadline deadline) = 0;

  // Atomically: if the current value equals `expected` (or the key is absent and `expected`
  // is empty), stores `desired`. Returns the value stored afterwards, so the caller won
  // exactly when the result equals `desired`. An absent key with a non-empty `expected` is
  // NotFound.
  virtual StatusOr<std::string> CompareSet(const std::string& key, const std::string& expected,
                                           const std::string& desired, Deadline deadline) = 0;

  // TryGet of every key in `keys`, in order: nullopt where a key does not exist; never waits.
  // A TcpStore asks for them in one round trip (a few for values of many MiB) instead of one
  // per key; the others look them up in turn.
  virtual StatusOr<std::vector<std::optional<std::string>>> TryGetMany(
      const std::vector<std::string>& keys, Deadline deadline);

  // Waits until every key in `keys` exists. DeadlineExceeded lists the keys still missing.
  // A key counts as present once seen during the wait, even if deleted afterwards.
  virtual Status Wait(const std::vector<std::string>& keys, Deadline deadline) = 0;

  // Removes `key`; NotFound when it does not exist.
  virtual Status Delete(const std::string& key, Deadline deadline) = 0;

  // Where the data lives: "file:///dir", "tcp://host:port", ...
  virtual std::string Describe() const = 0;
};

// InvalidArgument when `key` is empty or longer than kMaxKeyBytes.
Status CheckKey(const std::string& key);
// InvalidArgument when `value` is longer than kMaxValueBytes.
Status CheckValue(const std::string& key, const std::string& value);

// A printable, quoted form of a key for messages and logs: 'rank/0', with bytes outside
// printable ASCII written as \xNN and long keys shortened.
std::string QuoteKey(const std::string& key);

// One result per key of `keys`, in order. Read with one TryGetMany; when that call fails,
// each key is read again on its own, so one key that cannot be read (or a store that gives
// up part way) leaves the others known.
std::vector<StatusOr<std::optional<std::string>>> TryGetEach(Store* store,
                                                             const std::vector<std::string>& keys,
                                                             Deadline deadline);

// Reads, in one TryGetMany, keys that every writer has published (the caller has waited for
// them). A key that is gone is Unavailable: "<name(i)> was removed from the store <where>
// after it was published (something deleted keys of this job)".
StatusOr<std::vector<std::string>> ReadPublished(Store* store, const std::vector<std::string>& keys,
                                                 Deadline deadline,
                                                 const std::function<std::string(size_t)>& name);

// Opens "file:///abs/dir" (a FileStore, creating the folder; file permissions protect it)
// or "tcp://host:port" (a TcpStore client proving `credentials`, retrying the connection
// until `deadline` and saying so on the log after 5 s and every 10 s; a peer that is no gyre
// store fails at once). Anything else is InvalidArgument naming the URL and the accepted forms.
StatusOr<std::unique_ptr<Store>> OpenStore(
    const std::string& url, Deadline deadline,
    const auth::Credentials& credentials = auth::Credentials());
// The error OpenStore would give for the form of `url`, without opening anything: for a
// launcher to refuse a malformed URL before it starts any rank.
Status CheckStoreUrl(const std::string& url);

}  // namespace gyre::store
