#include "core/store/store.h"

#include <arpa/inet.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <thread>

#include "core/store/file_store.h"
#include "core/store/store_internal.h"
#include "core/store/tcp_store.h"

namespace gyre::store {

Status CheckKey(const std::string& key) {
  if (key.empty()) return InvalidArgumentError("store key is empty");
  if (key.size() > kMaxKeyBytes) {
    return InvalidArgumentError("store key " + QuoteKey(key) + " is " + std::to_string(key.size()) +
                                " bytes; the limit is " + std::to_string(kMaxKeyBytes));
  }
  return Status::Ok();
}

StatusOr<std::vector<std::optional<std::string>>> Store::TryGetMany(
    const std::vector<std::string>& keys, Deadline deadline) {
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  for (const std::string& key : keys) {
    GYRE_ASSIGN_OR_RETURN(std::optional<std::string> value, TryGet(key, deadline));
    values.push_back(std::move(value));
  }
  return values;
}

std::vector<StatusOr<std::optional<std::string>>> TryGetEach(Store* store,
                                                             const std::vector<std::string>& keys,
                                                             Deadline deadline) {
  StatusOr<std::vector<std::optional<std::string>>> all = store->TryGetMany(keys, deadline);
  std::vector<StatusOr<std::optional<std::string>>> each;
  each.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (all.ok()) {
      each.emplace_back(std::move((*all)[i]));
    } else {
      each.push_back(store->TryGet(keys[i], deadline));
    }
  }
  return each;
}

StatusOr<std::vector<std::string>> ReadPublished(Store* store, const std::vector<std::string>& keys,
                                                 Deadline deadline,
                                                 const std::function<std::string(size_t)>& name) {
  GYRE_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> values,
                        store->TryGetMany(keys, deadline));
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!values[i].has_value()) {
      return UnavailableError(name(i) + " was removed from the store " + store->Describe() +
                              " after it was published (something deleted keys of this job)");
    }
    out.push_back(std::move(*values[i]));
  }
  return out;
}

Status CheckValue(const std::string& key, const std::string& value) {
  if (value.size() > kMaxValueBytes) {
    return InvalidArgumentError("value for store key " + QuoteKey(key) + " is " +
                                std::to_string(value.size()) + " bytes; the limit is " +
                                std::to_string(kMaxValueBytes));
  }
  return Status::Ok();
}

std::string QuoteKey(const std::string& key) {
  constexpr size_t kMaxShown = 120;
  std::string out = "'";
  size_t shown = 0;
  for (unsigned char c : key) {
    if (shown == kMaxShown) {
      out += "...(" + std::to_string(key.size()) + " bytes)";
      break;
    }
    if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
    ++shown;
  }
  out += "'";
  return out;
}

namespace {

// "tcp://host:port" or "tcp://[v6]:port" split into host and port.
Status ParseHostPort(const std::string& url, const std::string& rest, std::string* host,
                     int* port) {
  std::string port_text;
  if (!rest.empty() && rest[0] == '[') {
    size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return InvalidArgumentError("store URL '" + url + "': expected tcp://[ipv6]:port");
    }
    *host = rest.substr(1, close - 1);
    port_text = rest.substr(close + 2);
  } else {
    size_t colon = rest.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      return InvalidArgumentError("store URL '" + url + "': expected tcp://host:port");
    }
    *host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
  }
  // Digits and dots are an IPv4 address or nothing: no host name is all digits in its last
  // label, so a mistyped address (an octet over 255) would be retried until the deadline as
  // a name not found yet. The forms the resolver takes ("127.1") stay accepted.
  if (!host->empty() && host->find_first_not_of("0123456789.") == std::string::npos) {
    in_addr ignored{};
    if (::inet_aton(host->c_str(), &ignored) == 0) {
      return InvalidArgumentError("store URL '" + url + "': '" + *host +
                                  "' is not an IPv4 address (four numbers 0..255) and cannot "
                                  "be a host name");
    }
  }
  int value = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), value);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || value <= 0 ||
      value > 65535) {
    return InvalidArgumentError("store URL '" + url + "': port '" + port_text +
                                "' is not a number in 1..65535");
  }
  *port = value;
  return Status::Ok();
}

}  // namespace

namespace {

constexpr char kFileScheme[] = "file://";
constexpr char kTcpScheme[] = "tcp://";

bool HasScheme(const std::string& url, const std::string& scheme) {
  return url.compare(0, scheme.size(), scheme) == 0;
}

}  // namespace

Status CheckStoreUrl(const std::string& url) {
  if (HasScheme(url, kFileScheme)) {
    const std::string dir = url.substr(std::string(kFileScheme).size());
    if (dir.empty() || dir[0] != '/') {
      return InvalidArgumentError("store URL '" + url +
                                  "': a file store needs an absolute folder, file:///abs/dir");
    }
    return Status::Ok();
  }
  if (HasScheme(url, kTcpScheme)) {
    std::string host;
    int port = 0;
    return ParseHostPort(url, url.substr(std::string(kTcpScheme).size()), &host, &port);
  }
  return InvalidArgumentError("unsupported store URL '" + url +
                              "'; accepted forms are file:///abs/dir and tcp://host:port");
}

StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& url, Deadline deadline,
                                           const auth::Credentials& credentials) {
  GYRE_RETURN_IF_ERROR(CheckStoreUrl(url));
  if (HasScheme(url, kFileScheme)) {
    GYRE_ASSIGN_OR_RETURN(std::unique_ptr<FileStore> store,
                          FileStore::Open(url.substr(std::string(kFileScheme).size())));
    return std::unique_ptr<Store>(std::move(store));
  }
  std::string host;
  int port = 0;
  GYRE_RETURN_IF_ERROR(
      ParseHostPort(url, url.substr(std::string(kTcpScheme).size()), &host, &port));
  GYRE_ASSIGN_OR_RETURN(std::unique_ptr<TcpStore> store,
                        TcpStore::Connect(host, port, deadline, credentials));
  return std::unique_ptr<Store>(std::move(store));
}

namespace internal {

std::string CallTimer::AfterText() const {
  std::string budget = budget_ == Duration::max() ? std::string("none") : FormatDuration(budget_);
  return "after " + FormatDuration(Elapsed()) + " (deadline " + budget + ")";
}

Status KeyNotSetError(const std::string& where, const char* op, const std::string& key,
                      const CallTimer& timer) {
  return DeadlineExceededError(where + ": " + op + " of key " + QuoteKey(key) +
                               " timed out: the key was not set " + timer.AfterText());
}

Status KeysMissingError(const std::string& where, const std::vector<std::string>& missing,
                        size_t total, const CallTimer& timer) {
  return DeadlineExceededError(where + ": Wait timed out " + timer.AfterText() + ": " +
                               std::to_string(missing.size()) + " of " + std::to_string(total) +
                               " keys missing: " + FormatKeyList(missing));
}

std::string FormatKeyList(const std::vector<std::string>& keys, size_t max_shown) {
  std::string out;
  for (size_t i = 0; i < keys.size() && i < max_shown; ++i) {
    if (i > 0) out += ", ";
    out += QuoteKey(keys[i]);
  }
  if (keys.size() > max_shown) out += " and " + std::to_string(keys.size() - max_shown) + " more";
  return out;
}

StatusOr<int64_t> AddToCounter(const std::string& where, const std::string& key,
                               const std::optional<std::string>& current, int64_t delta) {
  int64_t value = 0;
  if (current.has_value()) {
    const std::string& text = *current;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      return InvalidArgumentError(where + ": Add on key " + QuoteKey(key) + ": the stored value " +
                                  QuoteKey(text.substr(0, 64)) + " is not a decimal int64");
    }
  }
  int64_t result = 0;
  if (__builtin_add_overflow(value, delta, &result)) {
    return InvalidArgumentError(where + ": Add on key " + QuoteKey(key) + ": " +
                                std::to_string(value) + " + " + std::to_string(delta) +
                                " overflows int64");
  }
  return result;
}

bool CompareSetMatches(const std::optional<std::string>& current, const std::string& expected) {
  if (!current.has_value()) return expected.empty();
  return *current == expected;
}

Status KeyAbsentForCompareSet(const std::string& where, const std::string& key) {
  return NotFoundError(where + ": CompareSet on key " + QuoteKey(key) +
                       ": the key does not exist and the expected value is not empty");
}

Status KeyNotFoundForDelete(const std::string& where, const std::string& key) {
  return NotFoundError(where + ": Delete of key " + QuoteKey(key) + ": no such key");
}

bool Backoff::SleepWithin(Deadline deadline) {
  Duration remaining = deadline.Remaining(*SteadyClock::Get());
  if (remaining <= Duration::zero()) return false;
  std::this_thread::sleep_for(std::min(next_, remaining));
  next_ = std::min(next_ * 2, cap_);
  return true;
}

}  // namespace internal
}  // namespace gyre::store
