// The in-process loopback transport: N ranks of one process exchange messages through a
// shared hub by memcpy. Deterministic and fast; it is what unit and world tests run on
// when they are not testing sockets. Messages sent before their receive is posted are
// copied and held (eager), so Send always completes inline.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>
#include <vector>

#include "core/transport/transport.h"

namespace gyre {

class LoopbackHub;

class LoopbackTransport final : public Transport {
 public:
  int rank() const override { return rank_; }
  int size() const override;
  const Clock& clock() const override;
  void Send(int peer, const MessageHeader& header, const void* data, size_t bytes,
            DoneCallback done) override;
  void Recv(int peer, const MessageHeader& header, void* data, size_t bytes,
            DoneCallback done) override;
  void CancelOperation(uint64_t seq, const Status& reason) override;
  uint64_t BytesReceivedFrom(int peer) const override;
  void Shutdown() override;

 private:
  friend class LoopbackHub;
  LoopbackTransport(std::shared_ptr<LoopbackHub> hub, int rank)
      : hub_(std::move(hub)), rank_(rank) {}
  std::shared_ptr<LoopbackHub> hub_;
  int rank_;
};

class LoopbackHub : public std::enable_shared_from_this<LoopbackHub> {
 public:
  // Creates `world_size` connected endpoints; `clock` (optional) must outlive them.
  static std::vector<std::unique_ptr<Transport>> CreateWorld(int world_size,
                                                             const Clock* clock = nullptr);

 private:
  friend class LoopbackTransport;
  using Key = std::tuple<int, uint64_t, uint64_t>;  // (src, seq, tag)
  struct PostedRecv {
    void* data;
    size_t bytes;
    OpDesc desc;
    DoneCallback done;
  };
  struct Arrived {
    std::vector<unsigned char> payload;
    OpDesc desc;
  };
  struct Endpoint {
    std::map<Key, PostedRecv> posted;
    std::map<Key, Arrived> arrived;
    std::set<uint64_t> cancelled;
    std::vector<uint64_t> bytes_from;
    bool closed = false;
  };

  explicit LoopbackHub(int n, const Clock* clock);
  static Status Mismatch(int src, int dst, const MessageHeader& h, size_t sent_bytes,
                         const OpDesc& sent_desc, size_t want_bytes, const OpDesc& want_desc);

  mutable std::mutex mu_;
  int n_;
  const Clock* clock_;
  std::vector<Endpoint> endpoints_;
};

}  // namespace gyre
