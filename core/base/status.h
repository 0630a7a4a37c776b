// Status and StatusOr: the error type returned across every gyre module boundary.
// Each code has exactly one meaning (see DESIGN.md); messages carry the rank, peer,
// operation and elapsed time so that an error read on its own explains itself.
#pragma once

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <utility>

namespace gyre {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,    // the caller's error: bad count, dtype, root, mismatched call
  kDeadlineExceeded = 2,   // a local deadline fired while waiting
  kUnavailable = 3,        // a peer or store is unreachable, reset or closed (EOF)
  kAborted = 4,            // torn down because another rank or operation failed
  kInternal = 5,           // a gyre bug or a broken invariant
  kNotFound = 6,           // a key or resource does not exist (store lookups)
  kAlreadyExists = 7,      // a key or rank is already taken
  kResourceExhausted = 8,  // a cap or a disk/memory limit was hit
};

const char* StatusCodeName(StatusCode code);
// Whether `code`, read off the wire, is one of the codes above (kOk included).
inline bool IsKnownStatusCode(int code) {
  return code >= 0 && code <= static_cast<int>(StatusCode::kResourceExhausted);
}

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "DeadlineExceeded: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy with `context + ": "` put in front of the message; OK stays OK.
  Status WithContext(const std::string& context) const;

  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

Status InvalidArgumentError(std::string message);
Status DeadlineExceededError(std::string message);
Status UnavailableError(std::string message);
Status AbortedError(std::string message);
Status InternalError(std::string message);
Status NotFoundError(std::string message);
Status AlreadyExistsError(std::string message);
Status ResourceExhaustedError(std::string message);

// `text` from outside (a peer's hello, a store record) for an error message: a byte outside
// printable ASCII as \xNN, at most 64 bytes shown, then "... (N bytes)".
std::string Printable(const std::string& text);

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    assert(!status_.ok() && "StatusOr built from an OK status without a value");
    if (status_.ok()) status_ = InternalError("StatusOr constructed from OK status");
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace gyre

#define GYRE_CONCAT_INNER(a, b) a##b
#define GYRE_CONCAT(a, b) GYRE_CONCAT_INNER(a, b)

// Returns from the current function if `expr` is not OK.
#define GYRE_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::gyre::Status gyre_status_ = (expr);        \
    if (!gyre_status_.ok()) return gyre_status_; \
  } while (0)

#define GYRE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

// `GYRE_ASSIGN_OR_RETURN(auto x, F());` binds x or returns F()'s error.
#define GYRE_ASSIGN_OR_RETURN(lhs, expr) \
  GYRE_ASSIGN_OR_RETURN_IMPL(GYRE_CONCAT(gyre_statusor_, __LINE__), lhs, expr)
