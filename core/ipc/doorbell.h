// A request/answer channel in shared memory between a program and its gyred: the fast path of
// a call through the daemon. The program writes a length-prefixed protobuf request into the
// block's request slot and rings (bumps a sequence word, and wakes the daemon with a futex
// only if it sleeps); the daemon answers into the answer slot the same way. Each side waits
// for the other by spinning (every process has a CPU), else by yielding the CPU, before it
// sleeps on the futex (WaitPolicy), so a hand-off is at most a futex wake and wait on each
// side, where the Unix socket cost a send, a poll and a recv on each side.
//
// The socket stays: it carries the handshake and the attach request, and its EOF is how each
// side learns that the other died. Liveness is not left to the futex: every wait sleeps in
// slices (WaitWhile returns after at most `slice`), and the caller checks the socket and the
// daemon's heartbeat counter between them.
//
// The block is writable by both processes, so neither trusts what the other wrote: a
// request is copied out of the slot before it is parsed, and lengths are checked against the
// slot.
#pragma once

#include <google/protobuf/message_lite.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/base/clock.h"
#include "core/base/status.h"

namespace gyre::ipc {

// How a side waits before it sleeps on the futex: spinning on the word (when every process
// has a CPU of its own), or looking at it between sched_yield calls (when processes outnumber
// the CPUs: the other side may need this very CPU, and a yield hands it over for a microsecond
// where a futex sleep and wake-up cost several). Either for up to the given time.
struct WaitPolicy {
  Duration spin{};
  Duration yield{};
};

// A side's policy: spin for up to `spin` when every process has a CPU (`spin_pays`, see
// ipc::SpinWaitPays), else yield for up to kDoorbellYield.
WaitPolicy DoorbellPolicy(bool spin_pays, Duration spin);
inline constexpr Duration kDoorbellYield = std::chrono::milliseconds(2);

class Doorbell {
 public:
  // The size of the shared block: a header page and two slots.
  static constexpr size_t kSlotBytes = 64 << 10;
  static constexpr size_t kHeaderBytes = 4096;
  static constexpr size_t kBlockBytes = kHeaderBytes + 2 * kSlotBytes;
  // The largest message a slot holds (after its 4-byte length).
  static constexpr size_t kMaxMessage = kSlotBytes - 4;

  // Lays out a fresh block at `mem` (kBlockBytes, zero-filled): the program's side.
  static Doorbell Create(void* mem);
  // Checks a block the program laid out and mapped here as `bytes`: the daemon's side.
  static StatusOr<Doorbell> Open(void* mem, size_t bytes);

  Doorbell() = default;

  // The program's side. Post writes `req` and rings; its number is returned in *seq.
  Status PostRequest(const google::protobuf::MessageLite& req, uint32_t* seq);
  // Waits (as `policy` says, then asleep) until the answer to `seq` is there, or `slice`
  // passes: returns whether it is.
  bool WaitAnswer(uint32_t seq, const WaitPolicy& policy, Duration slice);
  Status ReadAnswer(google::protobuf::MessageLite* resp) const;
  uint64_t heartbeat() const { return header()->heartbeat.load(std::memory_order_relaxed); }

  // The daemon's side. WaitRequest returns whether a request after `last` is there (waiting as
  // `policy` says, then asleep up to `slice`); ReadRequest copies it out, parses it and
  // names its number; PostAnswer answers request `seq`.
  bool WaitRequest(uint32_t last, const WaitPolicy& policy, Duration slice);
  Status ReadRequest(google::protobuf::MessageLite* req, uint32_t* seq) const;
  Status PostAnswer(const google::protobuf::MessageLite& resp, uint32_t seq);
  void Beat() { header()->heartbeat.fetch_add(1, std::memory_order_relaxed); }

  bool valid() const { return mem_ != nullptr; }

 private:
  struct Header {
    uint32_t magic;
    uint32_t version;
    uint64_t slot_bytes;
    alignas(64) std::atomic<uint32_t> request_seq;
    std::atomic<uint32_t> daemon_sleeping;
    alignas(64) std::atomic<uint32_t> answer_seq;
    std::atomic<uint32_t> program_sleeping;
    alignas(64) std::atomic<uint64_t> heartbeat;
  };
  static_assert(sizeof(Header) <= kHeaderBytes);
  static_assert(std::atomic<uint32_t>::is_always_lock_free);

  explicit Doorbell(void* mem) : mem_(static_cast<unsigned char*>(mem)) {}
  Header* header() const { return reinterpret_cast<Header*>(mem_); }
  unsigned char* request_slot() const { return mem_ + kHeaderBytes; }
  unsigned char* answer_slot() const { return mem_ + kHeaderBytes + kSlotBytes; }

  unsigned char* mem_ = nullptr;
};

// Waits while `word` holds `value`: spins up to policy.spin (not at all when this thread may
// run on one CPU only), yields up to policy.yield (stopping at a yield that comes back late: a
// CPU hog has the core), then sleeps on a futex up to `slice`, announcing the sleep in
// `sleeping` so the writer knows to wake it. Returns whether the word changed. Ring is the
// writer's half: it stores `value` and wakes a sleeper.
bool WaitWhile(std::atomic<uint32_t>* word, uint32_t value, std::atomic<uint32_t>* sleeping,
               const WaitPolicy& policy, Duration slice);
void Ring(std::atomic<uint32_t>* word, uint32_t value, std::atomic<uint32_t>* sleeping);

}  // namespace gyre::ipc
