#include "core/comm/flight_recorder.h"

#include <chrono>
#include <cstdio>
#include <sstream>

#include "core/exec/executor.h"

namespace gyre {

std::string JsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

FlightRecorder::Event& FlightRecorder::Next(const char* kind, uint64_t seq) {
  const int64_t t = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
  Event* e;
  if (ring_.size() < capacity_) {
    e = &ring_.emplace_back();
  } else {
    e = &ring_[next_];
    next_ = (next_ + 1) % capacity_;
  }
  e->t_us = t;
  e->kind = kind;
  e->seq = seq;
  return *e;
}

void FlightRecorder::Record(const char* kind, uint64_t seq, const std::string& detail) {
  std::lock_guard<std::mutex> lock(mu_);
  Event& e = Next(kind, seq);
  e.detail.assign(detail);
  e.named_by_desc = false;
}

void FlightRecorder::RecordOp(const char* kind, uint64_t seq, const OpDesc& desc) {
  std::lock_guard<std::mutex> lock(mu_);
  Event& e = Next(kind, seq);
  e.detail.clear();
  e.named_by_desc = true;
  e.desc = desc;
}

size_t FlightRecorder::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_.size();
}

std::string FlightRecorder::DumpJson(int rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  os << "{\"rank\": " << rank << ", \"events\": [";
  const size_t n = ring_.size();
  for (size_t k = 0; k < n; ++k) {
    const Event& e = ring_[(ring_.size() < capacity_ ? k : (next_ + k) % capacity_)];
    os << (k ? ", " : "") << "{\"t_us\": " << e.t_us << ", \"kind\": \"" << JsonEscape(e.kind)
       << "\", \"seq\": " << e.seq << ", \"detail\": \""
       << JsonEscape(e.named_by_desc ? OpName(e.desc, e.seq) : e.detail) << "\"}";
  }
  os << "]}";
  return os.str();
}

}  // namespace gyre
