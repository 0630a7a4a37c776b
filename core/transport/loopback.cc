#include "core/transport/loopback.h"

#include <cstring>

namespace gyre {

LoopbackHub::LoopbackHub(int n, const Clock* clock)
    : n_(n), clock_(clock ? clock : SteadyClock::Get()), endpoints_(n) {
  for (auto& e : endpoints_) e.bytes_from.assign(n, 0);
}

std::vector<std::unique_ptr<Transport>> LoopbackHub::CreateWorld(int world_size,
                                                                 const Clock* clock) {
  std::shared_ptr<LoopbackHub> hub(new LoopbackHub(world_size, clock));
  std::vector<std::unique_ptr<Transport>> out;
  for (int r = 0; r < world_size; ++r) {
    out.push_back(std::unique_ptr<Transport>(new LoopbackTransport(hub, r)));
  }
  return out;
}

Status LoopbackHub::Mismatch(int src, int dst, const MessageHeader& h, size_t sent_bytes,
                             const OpDesc& sent_desc, size_t want_bytes, const OpDesc& want_desc) {
  if (sent_desc != want_desc) {
    return InvalidArgumentError("mismatched calls at " + DescribeSeqTag(h.seq, h.tag) + ": rank " +
                                std::to_string(src) + " called " + DescribeOpDesc(sent_desc) +
                                " but rank " + std::to_string(dst) + " called " +
                                DescribeOpDesc(want_desc));
  }
  return InvalidArgumentError("message size mismatch at " + DescribeSeqTag(h.seq, h.tag) +
                              ": rank " + std::to_string(src) + " sent " +
                              std::to_string(sent_bytes) + " bytes but rank " +
                              std::to_string(dst) + " expected " + std::to_string(want_bytes));
}

int LoopbackTransport::size() const { return hub_->n_; }
const Clock& LoopbackTransport::clock() const { return *hub_->clock_; }

void LoopbackTransport::Send(int peer, const MessageHeader& h, const void* data, size_t bytes,
                             DoneCallback done) {
  LoopbackHub& hub = *hub_;
  if (peer < 0 || peer >= hub.n_ || peer == rank_) {
    done(InvalidArgumentError("send to invalid peer " + std::to_string(peer)));
    return;
  }
  DoneCallback recv_done;
  Status recv_status;
  Status send_status;
  do {
    std::lock_guard<std::mutex> lock(hub.mu_);
    if (hub.endpoints_[rank_].closed) {
      send_status = AbortedError("rank " + std::to_string(rank_) + " transport is shut down");
      break;
    }
    LoopbackHub::Endpoint& dst = hub.endpoints_[peer];
    if (dst.closed) {
      send_status =
          UnavailableError("rank " + std::to_string(peer) + " is gone (its transport closed)");
      break;
    }
    if (dst.cancelled.count(h.seq)) {
      break;  // the receiver gave up on this operation; drop silently
    }
    LoopbackHub::Key key{rank_, h.seq, h.tag};
    auto it = dst.posted.find(key);
    if (it != dst.posted.end()) {
      LoopbackHub::PostedRecv recv = std::move(it->second);
      dst.posted.erase(it);
      if (recv.bytes != bytes || recv.desc != h.desc) {
        recv_status = LoopbackHub::Mismatch(rank_, peer, h, bytes, h.desc, recv.bytes, recv.desc);
      } else {
        if (bytes > 0) std::memcpy(recv.data, data, bytes);
        dst.bytes_from[rank_] += bytes;
      }
      recv_done = std::move(recv.done);
    } else {
      // A posted receive of the same operation from this sender with another fingerprint
      // means the two ranks made different calls: fail it now, not at its deadline.
      auto lo = dst.posted.lower_bound(LoopbackHub::Key{rank_, h.seq, 0});
      if (lo != dst.posted.end() && std::get<0>(lo->first) == rank_ &&
          std::get<1>(lo->first) == h.seq && lo->second.desc != h.desc) {
        recv_status =
            LoopbackHub::Mismatch(rank_, peer, h, bytes, h.desc, lo->second.bytes, lo->second.desc);
        recv_done = std::move(lo->second.done);
        dst.posted.erase(lo);
      }
      LoopbackHub::Arrived a;
      a.payload.assign(static_cast<const unsigned char*>(data),
                       static_cast<const unsigned char*>(data) + bytes);
      a.desc = h.desc;
      dst.arrived[key] = std::move(a);
    }
  } while (false);
  if (recv_done) recv_done(recv_status);
  done(send_status);
}

void LoopbackTransport::Recv(int peer, const MessageHeader& h, void* data, size_t bytes,
                             DoneCallback done) {
  LoopbackHub& hub = *hub_;
  if (peer < 0 || peer >= hub.n_ || peer == rank_) {
    done(InvalidArgumentError("receive from invalid peer " + std::to_string(peer)));
    return;
  }
  Status status;
  {
    std::lock_guard<std::mutex> lock(hub.mu_);
    LoopbackHub::Endpoint& me = hub.endpoints_[rank_];
    if (me.closed) {
      status = AbortedError("rank " + std::to_string(rank_) + " transport is shut down");
    } else {
      LoopbackHub::Key key{peer, h.seq, h.tag};
      auto it = me.arrived.find(key);
      if (it != me.arrived.end()) {
        LoopbackHub::Arrived a = std::move(it->second);
        me.arrived.erase(it);
        if (a.payload.size() != bytes || a.desc != h.desc) {
          status = LoopbackHub::Mismatch(peer, rank_, h, a.payload.size(), a.desc, bytes, h.desc);
        } else {
          if (bytes > 0) std::memcpy(data, a.payload.data(), bytes);
          me.bytes_from[peer] += bytes;
        }
      } else if (auto lo = me.arrived.lower_bound(LoopbackHub::Key{peer, h.seq, 0});
                 lo != me.arrived.end() && std::get<0>(lo->first) == peer &&
                 std::get<1>(lo->first) == h.seq && lo->second.desc != h.desc) {
        // An early message of this operation from that peer carries another call.
        status = LoopbackHub::Mismatch(peer, rank_, h, lo->second.payload.size(), lo->second.desc,
                                       bytes, h.desc);
      } else if (hub.endpoints_[peer].closed) {
        status =
            UnavailableError("rank " + std::to_string(peer) + " is gone (its transport closed)");
      } else {
        me.posted[key] = LoopbackHub::PostedRecv{data, bytes, h.desc, std::move(done)};
        return;
      }
    }
  }
  done(status);
}

void LoopbackTransport::CancelOperation(uint64_t seq, const Status& reason) {
  LoopbackHub& hub = *hub_;
  std::vector<DoneCallback> cancelled;
  {
    std::lock_guard<std::mutex> lock(hub.mu_);
    LoopbackHub::Endpoint& me = hub.endpoints_[rank_];
    me.cancelled.insert(seq);
    for (auto it = me.posted.begin(); it != me.posted.end();) {
      if (std::get<1>(it->first) == seq) {
        cancelled.push_back(std::move(it->second.done));
        it = me.posted.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = me.arrived.begin(); it != me.arrived.end();) {
      it = std::get<1>(it->first) == seq ? me.arrived.erase(it) : std::next(it);
    }
  }
  for (auto& d : cancelled) d(reason);
}

uint64_t LoopbackTransport::BytesReceivedFrom(int peer) const {
  std::lock_guard<std::mutex> lock(hub_->mu_);
  if (peer < 0 || peer >= hub_->n_) return 0;
  return hub_->endpoints_[rank_].bytes_from[peer];
}

void LoopbackTransport::Shutdown() {
  LoopbackHub& hub = *hub_;
  std::vector<std::pair<DoneCallback, Status>> failed;
  {
    std::lock_guard<std::mutex> lock(hub.mu_);
    if (hub.endpoints_[rank_].closed) return;
    hub.endpoints_[rank_].closed = true;
    for (int q = 0; q < hub.n_; ++q) {
      LoopbackHub::Endpoint& e = hub.endpoints_[q];
      for (auto it = e.posted.begin(); it != e.posted.end();) {
        if (q == rank_) {
          failed.emplace_back(std::move(it->second.done),
                              AbortedError("rank " + std::to_string(rank_) + " shut down"));
          it = e.posted.erase(it);
        } else if (std::get<0>(it->first) == rank_) {
          failed.emplace_back(std::move(it->second.done),
                              UnavailableError("rank " + std::to_string(rank_) +
                                               " is gone (its transport closed)"));
          it = e.posted.erase(it);
        } else {
          ++it;
        }
      }
    }
  }
  for (auto& [d, s] : failed) d(s);
}

}  // namespace gyre
