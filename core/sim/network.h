// The link model. Each directed link serves one message at a time, first come first served
// by the time a message's head reaches it (a later message waits; it never shares the
// bandwidth). A message moves cut-through: its head reaches link k+1 one latency after it
// started on link k, waiting there while link k+1 is busy (switches buffer without limit);
// link k+1 stays busy for the message's bytes at its own rate and at least until the tail
// has come in from link k. Without contention a message of b bytes therefore arrives after
// the sum of the route's latencies plus b over the slowest link's bandwidth. Links of
// unlimited bandwidth are not resources: they only add their latency. Times are integer
// nanoseconds.
#pragma once

#include <cstdint>
#include <vector>

#include "core/sim/topology.h"

namespace gyre::sim {

// ceil(bytes / bandwidth) in nanoseconds; 0 for an unlimited link.
int64_t SerializationNs(int64_t bytes, int64_t bandwidth_bps);

// A message on its way: the route and how far along it the head and the tail are.
struct Flight {
  std::vector<int> path;  // link ids
  size_t hop = 0;         // the next link to take
  int64_t bytes = 0;
  int64_t head_ns = 0;     // when the head reaches path[hop] (or the receiver)
  int64_t tail_in_ns = 0;  // when the tail has come in from path[hop - 1] (or the receiver)
  int64_t sent_ns = -1;    // when the tail left the first link (the sender's buffer is free)
};

class Network {
 public:
  // `topology` must outlive the network; mapping[rank] = device (a permutation).
  Network(const Topology* topology, std::vector<int> mapping);

  // Routes a message of `bytes` from rank src to rank dst, sent at `now_ns`.
  void Start(int src, int dst, int64_t bytes, int64_t now_ns, Flight* f);
  // Called at f->head_ns: the head takes the next link (and any unlimited links after it).
  // Returns true when the message has arrived, at f->tail_in_ns; otherwise call again at
  // f->head_ns, when the head reaches the next link. The caller must make the calls of all
  // messages in time order: that order is each link's service order.
  bool Advance(Flight* f);

  struct LinkStats {
    int64_t bytes = 0;
    int64_t messages = 0;
    int64_t busy_ns = 0;  // time the link was held by messages
  };
  const std::vector<LinkStats>& link_stats() const { return stats_; }
  const Topology& topology() const { return *topology_; }
  const std::vector<int>& mapping() const { return mapping_; }

 private:
  const Topology* topology_;
  std::vector<int> mapping_;
  std::vector<int64_t> free_ns_;  // per link: when its last message is through
  std::vector<LinkStats> stats_;
};

}  // namespace gyre::sim
