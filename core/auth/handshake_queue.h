// The connections an endpoint has accepted that have not yet proven themselves, oldest
// first, and the rule every gyre network endpoint (peer port, TCP store, control endpoint)
// applies at its cap: the connection that has waited longest in the handshake is cut off
// for the newcomer. A real rank or client proves itself within milliseconds of connecting,
// so strangers holding idle connections (no secret needed) cannot lock the job out; only
// when nothing waits in the handshake does the newcomer go.
//
// Not thread-safe: each endpoint drives it from one thread or under its own lock. Caps are
// tens of connections, so a linear search is cheaper than any index.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <optional>
#include <utility>

namespace gyre::auth {

template <typename Id>
class HandshakeQueue {
 public:
  // A newcomer, accepted. The caller applies the cap first (MakeRoom or TakeOldest).
  void Add(Id id) { waiting_.push_back(std::move(id)); }

  // The cap rule, applied before a newcomer is added: while `cap` or more wait, the one that
  // has waited longest is taken off and given to `cut_off(id, waiting)` to be cut off
  // (`waiting` is how many were in the handshake). False when the newcomer must be refused
  // instead, which is only when nothing waits yet the cap is reached (a cap of 0).
  template <typename CutOff>
  bool MakeRoom(size_t cap, CutOff&& cut_off) {
    while (waiting_.size() >= cap && !waiting_.empty()) {
      const size_t waiting = waiting_.size();
      Id oldest = std::move(waiting_.front());
      waiting_.pop_front();
      cut_off(oldest, waiting);
    }
    return waiting_.size() < cap;
  }

  // Off the queue: proven, refused or closed. False if it was not there, which means it was
  // cut off at the cap already (or never added).
  bool Remove(const Id& id) {
    auto it = std::find(waiting_.begin(), waiting_.end(), id);
    if (it == waiting_.end()) return false;
    waiting_.erase(it);
    return true;
  }

  // The connection that has waited longest, taken off the queue for the caller to cut off;
  // nullopt when none waits. For an endpoint whose cap counts more than the handshakes.
  std::optional<Id> TakeOldest() {
    if (waiting_.empty()) return std::nullopt;
    Id oldest = std::move(waiting_.front());
    waiting_.pop_front();
    return oldest;
  }

  size_t size() const { return waiting_.size(); }
  bool empty() const { return waiting_.empty(); }

 private:
  std::deque<Id> waiting_;
};

}  // namespace gyre::auth
