#include "core/sim/network.h"

#include <algorithm>

namespace gyre::sim {

int64_t SerializationNs(int64_t bytes, int64_t bandwidth_bps) {
  if (bandwidth_bps <= 0 || bytes <= 0) return 0;
  // 128-bit so that gigabyte messages times 1e9 do not overflow.
  const unsigned __int128 num = static_cast<unsigned __int128>(bytes) * 1'000'000'000u;
  const unsigned __int128 den = static_cast<unsigned __int128>(bandwidth_bps);
  return static_cast<int64_t>((num + den - 1) / den);
}

Network::Network(const Topology* topology, std::vector<int> mapping)
    : topology_(topology), mapping_(std::move(mapping)) {
  free_ns_.assign(topology_->links().size(), 0);
  stats_.assign(topology_->links().size(), LinkStats{});
}

void Network::Start(int src, int dst, int64_t bytes, int64_t now_ns, Flight* f) {
  f->path.clear();
  topology_->Route(mapping_[src], mapping_[dst], &f->path);
  f->hop = 0;
  f->bytes = bytes;
  f->head_ns = now_ns;
  f->tail_in_ns = now_ns;
  f->sent_ns = -1;
}

bool Network::Advance(Flight* f) {
  const std::vector<Link>& links = topology_->links();
  bool took_limited = false;
  while (f->hop < f->path.size()) {
    const int id = f->path[f->hop];
    const LinkParams& lp = links[id].params;
    LinkStats& st = stats_[id];
    int64_t start = f->head_ns;
    int64_t end;
    if (lp.bandwidth_bps > 0) {
      // A limited link after the first one is taken at its own event, so that links serve
      // heads in the order they arrive.
      if (took_limited) return false;
      took_limited = true;
      start = std::max(start, free_ns_[id]);
      end = std::max(start + SerializationNs(f->bytes, lp.bandwidth_bps), f->tail_in_ns);
      st.busy_ns += end - start;
      free_ns_[id] = end;
    } else {
      end = std::max(start, f->tail_in_ns);
    }
    st.bytes += f->bytes;
    st.messages += 1;
    if (f->hop == 0) f->sent_ns = end;
    f->head_ns = start + lp.latency_ns;
    f->tail_in_ns = end + lp.latency_ns;
    ++f->hop;
  }
  return true;
}

}  // namespace gyre::sim
