// The simulated transport and its discrete-event loop. SimWorld owns p SimTransports (one
// per rank, behind the same Transport seam as TCP and loopback), a ManualClock they all
// report, the Network that times every message, and a queue of events (a send's buffer
// is free, a message's head reaches its next link, a message has arrived, a receive has
// been reduced). Run() drives one OpRun per rank: when events fire it sets the clock,
// completes the transport callbacks (which only queue completions in the OpRun), then polls
// the ranks they touched, whose new sends are timed once the instant has settled.
//
// Threading: everything runs on the thread that calls Run(); nothing here is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/algo/schedule.h"
#include "core/base/clock.h"
#include "core/exec/executor.h"
#include "core/sim/network.h"
#include "core/transport/transport.h"

namespace gyre::sim {

struct SimWorldOptions {
  // Every message is timed as bytes * byte_scale, so a run can check real data on small
  // buffers and report the time of large ones.
  int64_t byte_scale = 1;
  // If > 0, a receive that feeds a reduction completes only after its (timed) bytes went
  // through the rank's one reduction unit at this rate; 0 makes reductions free (the cost
  // model's default).
  double reduce_bytes_per_s = 0;
};

class SimTransport;

class SimWorld {
 public:
  // `network` must outlive the world and map world_size ranks.
  SimWorld(Network* network, int world_size, SimWorldOptions options = {});
  ~SimWorld();
  SimWorld(const SimWorld&) = delete;
  SimWorld& operator=(const SimWorld&) = delete;

  int size() const { return static_cast<int>(endpoints_.size()); }
  Transport* transport(int rank);
  const ManualClock& clock() const { return clock_; }
  int64_t now_ns() const { return now_ns_; }

  // The schedule `rank` runs (must outlive the world). With it, sends that become ready at
  // the same instant leave in step order (the cost model's rule), reductions can be timed,
  // and the longest chain of messages is counted. Without it, sends leave in issue order.
  void SetSchedule(int rank, const algo::RankSchedule* schedule, size_t elem_bytes);

  // Starts every run (already Prepare()d; runs[r] runs on transport(r)) and processes events
  // until none are left. OK when every run finished OK; otherwise the first failure, or
  // Internal naming the ranks left waiting, or DeadlineExceeded when `wall_deadline` (on
  // the steady clock) passes first.
  Status Run(const std::vector<OpRun*>& runs, Deadline wall_deadline);

  int64_t events() const { return events_; }
  int64_t messages() const { return messages_; }
  int64_t hops_total() const { return hops_total_; }
  int hops_max() const { return hops_max_; }
  // Messages on the longest dependency chain (the algorithm's steps as run); 0 without
  // schedules.
  int64_t longest_chain() const { return longest_chain_; }

 private:
  friend class SimTransport;

  struct Key {
    int src;
    uint64_t seq;
    uint64_t tag;
    bool operator==(const Key& o) const { return src == o.src && seq == o.seq && tag == o.tag; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      // Tags keep their low bits for segments (often 0), so mix everything.
      uint64_t z = k.tag ^ (k.seq << 20) ^ (static_cast<uint64_t>(k.src) * 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return static_cast<size_t>(z ^ (z >> 31));
    }
  };
  struct Message {
    int src = 0;
    int dst = 0;
    MessageHeader header;
    size_t bytes = 0;
    std::vector<unsigned char> payload;
    bool has_payload = false;
    DoneCallback send_done;
    int send_step = -1;
    int depth = 0;
    Flight flight;
    int refs = 0;  // the arrival and the send completion each hold one
    bool live = false;
  };
  struct PostedRecv {
    void* data = nullptr;
    size_t bytes = 0;
    OpDesc desc;
    DoneCallback done;
    int step = -1;
  };
  // A receive step's meeting point: its posted receive or its early message. Indexing by
  // step keeps the common case out of the hash maps, which hold the rest (no schedule, or
  // two operations' messages for one step at once).
  struct Slot {
    bool has_recv = false;
    uint64_t seq = 0;
    PostedRecv recv;
    int message = -1;
  };
  struct Endpoint {
    std::vector<Slot> slots;  // by step index of the rank's schedule
    std::unordered_map<Key, PostedRecv, KeyHash> posted;
    std::unordered_map<Key, int, KeyHash> arrived;  // message ids
    std::unordered_set<uint64_t> cancelled;
    std::unordered_map<int, uint64_t> bytes_from;
    bool closed = false;
    int64_t reduce_free_ns = 0;
  };
  struct StepKey {
    uint64_t tag;
    int32_t peer;
    int32_t kind;  // 0 send, 1 receive
    int32_t step;
    bool operator<(const StepKey& o) const;
  };
  struct RankInfo {
    const algo::RankSchedule* schedule = nullptr;
    std::vector<StepKey> steps;         // sends and receives, sorted for lookup
    std::vector<int64_t> reduce_elems;  // per receive step: elements its reductions fold
    std::vector<int32_t> depth;         // per step: messages on the longest chain to it
    std::vector<int32_t> dep_begin;     // deps of step i: deps[dep_begin[i] .. dep_begin[i+1])
    std::vector<int32_t> deps;
    size_t elem_bytes = 1;
  };
  struct PendingSend {
    int rank;
    int step;
    int64_t order;
    int message;
  };
  enum class EventKind : uint8_t { kSendDone, kHop, kArrive, kRecvDone };
  struct Event {
    int64_t time;
    int64_t order;
    EventKind kind;
    int id;
    bool operator>(const Event& o) const {
      return time != o.time ? time > o.time : order > o.order;
    }
  };
  struct Completion {
    int rank = 0;
    uint64_t seq = 0;
    DoneCallback done;
    Status status;
  };

  // Transport entry points (called by SimTransport).
  void Send(int rank, int peer, const MessageHeader& h, const void* data, size_t bytes,
            DoneCallback done);
  void Recv(int rank, int peer, const MessageHeader& h, void* data, size_t bytes,
            DoneCallback done);
  void CancelOperation(int rank, uint64_t seq, const Status& reason);
  void Shutdown(int rank);
  uint64_t BytesReceivedFrom(int rank, int peer) const;

  int NewMessage();
  void Release(int id);
  void Push(int64_t time, EventKind kind, int id);
  void FlushSends();
  void Apply(const Event& ev);
  void Fly(int id);
  void Deliver(int id);
  void Match(int rank, int id, PostedRecv recv);
  void Complete(int rank, DoneCallback done, Status status);
  void MarkDirty(int rank);
  int FindStep(int rank, int peer, uint64_t tag, int kind) const;
  int Depth(int rank, int step);
  int DepsDepth(int rank, int step);

  Network* network_;
  SimWorldOptions options_;
  ManualClock clock_;
  int64_t now_ns_ = 0;
  std::vector<std::unique_ptr<SimTransport>> transports_;
  std::vector<Endpoint> endpoints_;
  std::vector<RankInfo> info_;
  std::vector<Message> messages_pool_;
  std::vector<int> free_messages_;
  std::vector<PendingSend> pending_sends_;
  std::vector<Completion> completions_;
  std::vector<int> free_completions_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> queue_;
  std::vector<char> dirty_;
  std::vector<int> dirty_list_;
  int64_t order_ = 0;
  int64_t events_ = 0;
  int64_t messages_ = 0;
  int64_t hops_total_ = 0;
  int hops_max_ = 0;
  int64_t longest_chain_ = 0;
};

// One rank's endpoint of a SimWorld.
class SimTransport final : public Transport {
 public:
  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  const Clock& clock() const override { return world_->clock(); }
  void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
            DoneCallback done) override {
    world_->Send(rank_, peer, header, data, bytes, std::move(done));
  }
  void Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
            DoneCallback done) override {
    world_->Recv(rank_, peer, header, data, bytes, std::move(done));
  }
  void CancelOperation(uint64_t seq, const Status& reason) override {
    world_->CancelOperation(rank_, seq, reason);
  }
  uint64_t BytesReceivedFrom(int peer) const override {
    return world_->BytesReceivedFrom(rank_, peer);
  }
  std::string DescribePeer(int peer) const override;
  void Shutdown() override { world_->Shutdown(rank_); }

 private:
  friend class SimWorld;
  SimTransport(SimWorld* world, int rank) : world_(world), rank_(rank) {}
  SimWorld* world_;
  int rank_;
};

}  // namespace gyre::sim
