#include "core/base/status.h"

namespace gyre {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
Status DeadlineExceededError(std::string m) {
  return Status(StatusCode::kDeadlineExceeded, std::move(m));
}
Status UnavailableError(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status AbortedError(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status InternalError(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status NotFoundError(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status AlreadyExistsError(std::string m) {
  return Status(StatusCode::kAlreadyExists, std::move(m));
}
Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}

std::string Printable(const std::string& text) {
  constexpr size_t kMost = 64;
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < kMost; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    }
  }
  if (text.size() > kMost) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace gyre
