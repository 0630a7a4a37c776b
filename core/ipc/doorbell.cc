#include "core/ipc/doorbell.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>
#include <vector>

namespace gyre::ipc {
namespace {

constexpr uint32_t kMagic = 0x67797264;  // "gyrd"
constexpr uint32_t kVersion = 1;

// A sched_yield that returns later than this gave the core to a task that kept it for a time
// slice (a CPU hog): yielding again would only wait for it again, so the waiter sleeps.
constexpr Duration kYieldTooLate = std::chrono::milliseconds(1);

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether this thread may run on more than one CPU. Spinning for the other process is worth
// it only then: pinned to one CPU (as a benchmark pins a program and its daemon together),
// the spinner holds the very CPU the other side needs. Asked at each wait, as the affinity
// can change after the connection starts (gyre-bench pins after connecting).
bool MayRunElsewhere() {
  cpu_set_t allowed;
  return ::sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) >= 2;
}

// A futex shared between processes: no FUTEX_PRIVATE_FLAG.
void FutexWait(std::atomic<uint32_t>* word, uint32_t value, Duration slice) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(slice).count();
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  // EAGAIN (the word changed), EINTR and ETIMEDOUT all mean: look again.
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, value, &ts, nullptr, 0);
}

void FutexWakeAll(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
            0);
}

// Writes `msg` length-prefixed into `slot`.
Status WriteSlot(unsigned char* slot, const google::protobuf::MessageLite& msg, const char* what) {
  const size_t n = msg.ByteSizeLong();
  if (n > Doorbell::kMaxMessage) {
    return InvalidArgumentError(std::string(what) + " of " + std::to_string(n) +
                                " bytes does not fit the shared slot of " +
                                std::to_string(Doorbell::kMaxMessage));
  }
  const uint32_t len = static_cast<uint32_t>(n);
  std::memcpy(slot, &len, 4);
  if (!msg.SerializeToArray(slot + 4, static_cast<int>(n))) {
    return InternalError(std::string("cannot serialize the ") + what);
  }
  return Status::Ok();
}

// Parses the message in `slot` from a private copy: the other process can write the slot
// while this one reads it, and what is checked must be what is used.
Status ReadSlot(const unsigned char* slot, google::protobuf::MessageLite* msg, const char* what) {
  uint32_t len = 0;
  std::memcpy(&len, slot, 4);
  if (len > Doorbell::kMaxMessage) {
    return InvalidArgumentError(std::string(what) + " in the shared slot claims " +
                                std::to_string(len) + " bytes, more than the slot's " +
                                std::to_string(Doorbell::kMaxMessage));
  }
  thread_local std::vector<unsigned char> copy;
  copy.assign(slot + 4, slot + 4 + len);
  if (!msg->ParseFromArray(copy.data(), static_cast<int>(len))) {
    return InvalidArgumentError(std::string(what) + " in the shared slot is not a valid message");
  }
  return Status::Ok();
}

}  // namespace

WaitPolicy DoorbellPolicy(bool spin_pays, Duration spin) {
  return spin_pays ? WaitPolicy{spin, {}} : WaitPolicy{{}, kDoorbellYield};
}

bool WaitWhile(std::atomic<uint32_t>* word, uint32_t value, std::atomic<uint32_t>* sleeping,
               const WaitPolicy& policy, Duration slice) {
  if (word->load(std::memory_order_acquire) != value) return true;
  const Clock& clock = *SteadyClock::Get();
  if (policy.spin > Duration::zero() && MayRunElsewhere()) {
    const TimePoint until = clock.Now() + policy.spin;
    while (true) {
      for (int i = 0; i < 64; ++i) {
        if (word->load(std::memory_order_acquire) != value) return true;
        CpuRelax();
      }
      if (clock.Now() >= until) break;
    }
  }
  if (policy.yield > Duration::zero()) {
    const TimePoint until = clock.Now() + policy.yield;
    while (true) {
      const TimePoint before = clock.Now();
      if (before >= until) break;
      ::sched_yield();
      if (word->load(std::memory_order_acquire) != value) return true;
      if (clock.Now() - before > kYieldTooLate) break;
    }
  }
  // Announce the sleep, then look once more: the writer stores the word before it reads the
  // flag, this side stores the flag before it reads the word (both sequentially consistent),
  // so one of the two sees the other and no wake is lost.
  sleeping->store(1);
  if (word->load() == value) FutexWait(word, value, slice);
  sleeping->store(0, std::memory_order_relaxed);
  return word->load(std::memory_order_acquire) != value;
}

void Ring(std::atomic<uint32_t>* word, uint32_t value, std::atomic<uint32_t>* sleeping) {
  word->store(value);
  if (sleeping->load() != 0) FutexWakeAll(word);
}

Doorbell Doorbell::Create(void* mem) {
  Header* h = new (mem) Header{};
  h->magic = kMagic;
  h->version = kVersion;
  h->slot_bytes = kSlotBytes;
  return Doorbell(mem);
}

StatusOr<Doorbell> Doorbell::Open(void* mem, size_t bytes) {
  if (bytes < kBlockBytes) {
    return InvalidArgumentError("the control block is " + std::to_string(bytes) +
                                " bytes; it must be " + std::to_string(kBlockBytes));
  }
  const Header* h = static_cast<const Header*>(mem);
  if (h->magic != kMagic || h->version != kVersion || h->slot_bytes != kSlotBytes) {
    return InvalidArgumentError("the control block is not a gyre doorbell of version " +
                                std::to_string(kVersion) + " (another gyre build?)");
  }
  return Doorbell(mem);
}

Status Doorbell::PostRequest(const google::protobuf::MessageLite& req, uint32_t* seq) {
  GYRE_RETURN_IF_ERROR(WriteSlot(request_slot(), req, "request"));
  *seq = header()->request_seq.load(std::memory_order_relaxed) + 1;
  Ring(&header()->request_seq, *seq, &header()->daemon_sleeping);
  return Status::Ok();
}

bool Doorbell::WaitAnswer(uint32_t seq, const WaitPolicy& policy, Duration slice) {
  const uint32_t now = header()->answer_seq.load(std::memory_order_acquire);
  if (now == seq) return true;
  WaitWhile(&header()->answer_seq, now, &header()->program_sleeping, policy, slice);
  return header()->answer_seq.load(std::memory_order_acquire) == seq;
}

Status Doorbell::ReadAnswer(google::protobuf::MessageLite* resp) const {
  return ReadSlot(answer_slot(), resp, "answer");
}

bool Doorbell::WaitRequest(uint32_t last, const WaitPolicy& policy, Duration slice) {
  return WaitWhile(&header()->request_seq, last, &header()->daemon_sleeping, policy, slice);
}

Status Doorbell::ReadRequest(google::protobuf::MessageLite* req, uint32_t* seq) const {
  *seq = header()->request_seq.load(std::memory_order_acquire);
  return ReadSlot(request_slot(), req, "request");
}

Status Doorbell::PostAnswer(const google::protobuf::MessageLite& resp, uint32_t seq) {
  GYRE_RETURN_IF_ERROR(WriteSlot(answer_slot(), resp, "answer"));
  Ring(&header()->answer_seq, seq, &header()->program_sleeping);
  return Status::Ok();
}

}  // namespace gyre::ipc
